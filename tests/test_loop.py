"""The epoch loop hands the run each epoch's end (methods/loop.py): fit() yields, a method's train_task passes the
yields on, and a phase made but never run is refused rather than silently skipped."""
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


def test_learning_yields_each_epoch_of_each_phase_in_turn():
    exp = experiment("method=packnet", "method.epochs=2", "method.retrain_epochs=3")
    ends = list(exp.method.learning(exp.tasks[0]))
    assert all(isinstance(end, EpochEnd) and end.task.id == 0 for end in ends)
    # PackNet's two phases: training, then retraining after the pruning between them
    assert [(end.phase, end.epoch) for end in ends] == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    state = ends[-1].state()
    assert (state["phase"], state["epoch"]) == (1, 2) and "state" in state["optimizer"]
    assert int(exp.method.tasks_learned) == 1  # the task counts as learned once its last end was taken


def test_the_task_is_learned_only_when_its_yields_run_out():
    exp = experiment("method=finetune", "method.epochs=3")
    steps = exp.method.learning(exp.tasks[0])
    first = next(steps)
    assert first.epoch == 0 and int(exp.method.tasks_learned) == 0  # the run holds control between epochs
    assert [end.epoch for end in steps] == [1, 2] and int(exp.method.tasks_learned) == 1


class Forgetful(Finetune):
    """A method author's slip: fit() called without `yield from`, so its phase would never run."""

    def train_task(self, task):
        self.loop.fit(task, lambda batch: self.loss(batch, task.id))


def test_a_fit_never_run_is_refused_not_skipped():
    exp = experiment("method=finetune")
    method = Forgetful(exp.method.cfg, exp.method.backbone, exp.info, exp.ctx)
    before = [p.detach().clone() for p in method.parameters()]
    with pytest.raises(RuntimeError, match=r"made 1 fit\(\) phase\(s\) it did not run.*yield from self.loop.fit"):
        method.learn(exp.tasks[0])
    assert all(torch.equal(a, b) for a, b in zip(before, method.parameters()))  # nothing trained


class ForgetfulHelper(Finetune):
    """The same slip one level up: a helper that yields from fit(), called without `yield from`."""

    def train_task(self, task):
        self.phase_one(task)
        yield from ()

    def phase_one(self, task):
        yield from self.loop.fit(task, lambda batch: self.loss(batch, task.id))


def test_a_training_helper_never_run_is_refused_too():
    exp = experiment("method=finetune")
    method = ForgetfulHelper(exp.method.cfg, exp.method.backbone, exp.info, exp.ctx)
    with pytest.raises(RuntimeError, match=r"made 0 fit\(\) phase\(s\) it did not run and ran 0"):
        method.learn(exp.tasks[0])
