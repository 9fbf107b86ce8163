"""Independent: a freshly initialised backbone and head for every task (T× the parameters). The accuracy
CPG aims to match with one network."""

from torch import nn

from .base import Method, Traits, fresh_copy, reset_parameters
from .heads import Heads


class Independent(Method):
    name = "independent"
    traits = Traits(scenarios=frozenset({"task"}), distributed_scenarios=frozenset({"task"}), graph_safe=True)

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        # The constructor's backbone is the template each task's network is copied from and re-drawn.
        self.nets = nn.ModuleList()

    def _new_net(self) -> nn.Module:
        net = nn.ModuleDict({"backbone": fresh_copy(self.backbone), "heads": Heads(self.backbone.feature_dim,
                                                                                      self.info)})
        reset_parameters(net, self.weight_init)
        return net.to(self.ctx.device)

    def train_task(self, task):
        while len(self.nets) <= task.id:
            self.nets.append(self._new_net())
        net = self.nets[task.id]
        self.loop.fit(task, lambda b: nn.functional.cross_entropy(self._logits(net, b.x, task.id),
                                                                   self.targets(b.y, task.id)),
                      params=net.parameters())

    @staticmethod
    def _logits(net, x, task_id):
        return net["heads"](net["backbone"](x), task_id)

    def forward(self, x, task_id):
        return self._logits(self.nets[task_id], x, task_id)

    def capacity(self):
        per_net = sum(p.numel() for p in self.nets[0].parameters()) if len(self.nets) else 0
        return {"params_total": per_net * len(self.nets), "params_per_task": per_net, "networks": len(self.nets)}

    def load_state_dict(self, state, strict=True, assign=False):
        # A checkpoint after task t holds t+1 networks: build them before loading their weights.
        count = 1 + max((int(k.split(".")[1]) for k in state if k.startswith("nets.")), default=-1)
        while len(self.nets) < count:
            self.nets.append(self._new_net())
        return super().load_state_dict(state, strict, assign)

