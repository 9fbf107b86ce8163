"""Finetune: train each task in turn with nothing protecting the old ones. The lower bound."""
from .base import Method, Traits


class Finetune(Method):
    name = "finetune"
    traits = Traits(scenarios=frozenset({"task", "class"}), distributed_scenarios=frozenset({"task", "class"}),
                    graph_safe=True)

    def train_task(self, task):
        self.loop.fit(task, lambda batch: self.loss(batch, task.id))
