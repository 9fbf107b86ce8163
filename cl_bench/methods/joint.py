"""Joint: at task t train on the union of tasks 0..t, continuing from the current weights. The upper bound."""
from ..data.scenarios import Split
from .base import Method, Traits


class Joint(Method):
    name = "joint"
    traits = Traits(scenarios=frozenset({"task", "class"}), distributed_scenarios=frozenset({"task", "class"}),
                    graph_safe=True)

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        self.seen_train: list[Split] = []  # training data of every task so far, already on the device

    def resumed(self, learned_tasks):
        self.seen_train = [t.train for t in learned_tasks]

    def train_task(self, task):
        self.seen_train.append(task.train)
        self.loop.fit(task, self.mixed_loss, data=Split.cat(self.seen_train))
