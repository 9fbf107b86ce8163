"""Experience replay: a reservoir memory of past samples, and a replay batch beside every new batch."""
from dataclasses import dataclass

import torch

from ..errors import UserError
from .base import Batch, Method, MethodConfig
from .memory import Memory


@dataclass
class ERConfig(MethodConfig):
    name: str = "er"
    memory_size: int = 500  # samples kept over the whole stream
    replay_batch_size: int = 0  # memory samples per step; 0 means batch_size


def check_memory_holds_every_class(memory_size: int, info) -> None:
    """A rehearsal memory smaller than the label space cannot hold one sample of each class."""
    if memory_size < info.num_outputs:
        raise UserError(f"method.memory_size={memory_size} is below the {info.num_outputs} classes of "
                        f"{info.dataset} ({info.scenario} scenario): use at least {info.num_outputs}")


class ER(Method):
    name = "er"
    scenarios = frozenset({"task", "class"})
    Config = ERConfig

    @classmethod
    def check_config(cls, cfg):
        if cfg.memory_size < 1:
            raise UserError(f"method.memory_size={cfg.memory_size} is out of range: use at least 1")

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        check_memory_holds_every_class(cfg.memory_size, info)
        self.memory = Memory(cfg.memory_size, info.input_shape, info.num_outputs, ctx.device)

    def train_task(self, task):
        replay = task.id > 0  # the memory holds only the current task's samples during task 0
        m = self.cfg.replay_batch_size or self.cfg.batch_size

        def loss(batch: Batch):
            if replay:
                raw, y, t, _ = self.memory.sample(m, self.ctx.generator)
                x = self.info.view.train(raw, self.ctx.generator)
                batch = Batch(None, torch.cat([batch.x, x]), torch.cat([batch.y, y]), torch.cat([batch.t, t]))
            return self.mixed_loss(batch)

        def store(batch: Batch):
            self.memory.add(batch.raw, batch.y, batch.t, generator=self.ctx.generator)

        self.fit(task, loss, after_step=store)

    def capacity(self):
        mem = sum(b.numel() * b.element_size() for b in self.memory.buffers())
        return {**super().capacity(), "memory_size": self.memory.size, "memory_bytes": mem}
