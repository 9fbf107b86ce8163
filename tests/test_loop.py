"""The epoch loop hands the run each epoch's end (methods/loop.py): fit() is a plain call that trains its phase and
calls the run's at_epoch_end after each epoch, so a method's helpers are plain functions that return what they
measured."""
import pytest
import torch

from cl_bench import api
from cl_bench.methods.finetune import Finetune
from cl_bench.methods.loop import EpochEnd

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = ("backbone=mlp", "backbone.hidden_sizes=[8]", "dataset.num_tasks=2", "logger=none", "data.val_fraction=0")


def experiment(*overrides):
    torch.manual_seed(0)
    return api.build(api.compose(*TINY, *overrides))


def test_learning_hands_the_run_each_epoch_of_each_phase_in_turn():
    exp = experiment("method=packnet", "method.epochs=2", "method.retrain_epochs=3")
    ends, learned = [], []
    exp.method.learn(exp.tasks[0], lambda end: (ends.append(end), learned.append(int(exp.method.tasks_learned))))
    assert all(isinstance(end, EpochEnd) and end.task.id == 0 for end in ends)
    # PackNet's two phases: training, then retraining after the pruning between them
    assert [(end.phase, end.epoch) for end in ends] == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    state = ends[-1].state()
    assert (state["phase"], state["epoch"]) == (1, 2) and "state" in state["optimizer"]
    # the run is called between epochs, before the task counts as learned; after its last phase, it does
    assert learned == [0] * 5 and int(exp.method.tasks_learned) == 1
    assert exp.method.loop.at_epoch_end is None  # the run's callback is the task's, not kept past it


class Helpers(Finetune):
    """A method whose phases run through plain helper functions that return what they measured."""

    def train_task(self, task):
        self.first_loss = self.train_phase(task, epochs=1)
        self.train_phase(task, epochs=2)

    def train_phase(self, task, epochs):
        losses = []
        self.loop.fit(task, lambda batch: self.loss(batch, task.id), epochs=epochs,
                      after_epoch=lambda epoch: losses.append(epoch))
        return losses


def test_helpers_are_plain_functions_and_each_fit_trains_when_called():
    exp = experiment("method=finetune")
    method = Helpers(exp.method.cfg, exp.method.backbone, exp.info, exp.ctx)
    before = [p.detach().clone() for p in method.parameters()]
    ends = []
    method.learn(exp.tasks[0], ends.append)
    assert method.first_loss == [0] and [(end.phase, end.epoch) for end in ends] == [(0, 0), (1, 0), (1, 1)]
    assert not all(torch.equal(a, b) for a, b in zip(before, method.parameters()))  # it trained


def test_a_failing_phase_leaves_no_callback_behind():
    exp = experiment("method=finetune", "method.epochs=2")

    def stop(end):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        exp.method.learn(exp.tasks[0], stop)
    assert exp.method.loop.at_epoch_end is None and int(exp.method.tasks_learned) == 0
    exp.method.learn(exp.tasks[0])  # learned again without the run's callback
    assert int(exp.method.tasks_learned) == 1
