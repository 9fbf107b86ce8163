"""BiC (Wu et al. 2019): the held-out exemplars that only stage 2 sees, the bias correction of the new classes'
logits, the distillation weighted by λ = n / (n + m) and stage 2's step by hand, and the real CLI."""
import copy
from dataclasses import replace

import pytest
import test_within_task
import torch
from conftest import cl_bench
from test_online import build

from cl_bench.data.scenarios import Split
from cl_bench.errors import UserError
from cl_bench.methods.base import Batch
from cl_bench.methods.bic import BiC, BiCConfig, budget

pytestmark = pytest.mark.usefixtures("one_thread")


def bic(*overrides):
    """BiC on split_digits with a tiny MLP, one epoch, 60 samples per task."""
    return build("method=bic", "scenario=class", "backbone.hidden_sizes=[16]", "method.epochs=1",
                 "dataset.samples_per_task=60", *overrides)


def rows(x: torch.Tensor) -> list[bytes]:
    return [bytes(r) for r in x.flatten(1).numpy()]


def network_state(method) -> dict:
    return {k: v.clone() for k, v in method.state_dict().items() if k.startswith(("backbone.", "heads."))}


def test_budget_splits_each_class_share_nine_to_one():
    assert budget(2000, 100, 0.1) == (2, 18)  # the paper's CIFAR-100 memory after the last task
    assert budget(2000, 10, 0.1) == (20, 180)
    assert budget(300, 10, 0.1) == (3, 27)  # 0.1 · 30 is 3.0000000000000004 in floating point
    assert budget(15, 10, 0.1) == (1, 0)


def test_held_out_samples_never_reach_stage_1_and_alone_fit_the_correction(monkeypatch):
    method, tasks = bic("method.memory_size=100", "dataset.num_tasks=2", "method.bias_epochs=3")
    stage1, stage2, frozen = [], [], []
    fit, correct_bias, eval_outputs = method.loop.fit, method.correct_bias, method.eval_outputs

    def recording_fit(task, loss_fn, **kw):
        def loss(batch):
            stage1.append(batch.raw)
            return loss_fn(batch)
        return fit(task, loss, **kw)

    def recording_correct_bias(task):
        before = network_state(method)
        stage2.append([])
        correct_bias(task)
        frozen.append(all(torch.equal(v, network_state(method)[k]) for k, v in before.items()))
        stage2[-1] = torch.cat(stage2[-1])

    def recording_eval_outputs(raw, fn):
        if stage2 and isinstance(stage2[-1], list):  # inside stage 2
            stage2[-1].append(raw)
        return eval_outputs(raw, fn)

    monkeypatch.setattr(method.loop, "fit", recording_fit)
    monkeypatch.setattr(method, "correct_bias", recording_correct_bias)
    monkeypatch.setattr(method, "eval_outputs", recording_eval_outputs)

    method.learn(tasks[0])
    view = method.held_out()  # rows that the next task rewrites: copied
    held0 = Split(view.x.clone(), view.y.clone(), view.t.clone())
    # 5 classes share 100 samples: 20 each, 2 of them held out; no stage 2 in the first task
    assert torch.bincount(held0.y).tolist() == [2] * 5 and stage2 == []
    stored0 = int(method.memory.class_count.sum())
    assert stored0 == len(tasks[0].train) - 10  # 18 exemplars per class allowed: all the trained ones are kept
    assert (method.alpha.tolist(), method.beta.tolist()) == ([1.0, 1.0], [0.0, 0.0])
    trained0 = torch.cat(stage1)
    assert len(trained0) == len(tasks[0].train) - 10  # the held-out samples are taken out of stage 1's data

    stage1.clear()
    method.learn(tasks[1])
    held1 = method.held_out()
    # 10 classes share 100 samples: 10 each, 1 held out: a balanced set, the old classes keeping their first
    assert torch.bincount(held1.y).tolist() == [1] * 10
    first = {int(c): rows(held0.x[held0.y == c])[0] for c in range(5)}
    assert all(rows(held1.x[held1.y == c]) == [first[c]] for c in range(5))
    assert method.memory.class_count.sum() + method.held_count <= 100

    trained1 = torch.cat(stage1)
    assert len(trained1) == len(tasks[1].train) - 5 + stored0  # the new data left and the old exemplars
    never_trained = set(rows(held0.x)) | set(rows(held1.x))
    assert not never_trained & set(rows(trained0)) and not never_trained & set(rows(trained1))
    # stage 2 saw exactly the held-out samples, with the network frozen, and fitted task 1's α and β
    assert len(stage2) == 1 and rows(stage2[0]) == rows(held1.x) and frozen == [True]
    assert method.alpha[0] == 1 and method.beta[0] == 0
    assert method.alpha[1] != 1 and method.beta[1] != 0


def test_stage_1_trains_on_the_new_data_left_and_the_stored_exemplars(monkeypatch):
    method, tasks = bic("method.memory_size=100", "dataset.num_tasks=2")
    method.learn(tasks[0])
    stored = [v.clone() for v in method.memory.stored()]  # views of rows rewritten after the task
    seen = []
    fit = method.loop.fit
    monkeypatch.setattr(method.loop, "fit", lambda task, loss_fn, data, **kw: (seen.append(data),
                                                                          fit(task, loss_fn, data=data, **kw))[1])
    method.learn(tasks[1])
    data = seen[0]
    old = data.y < 5
    assert rows(data.x[old]) == rows(stored[0]) and torch.equal(data.y[old], stored[1])
    assert (~old).sum() == len(tasks[1].train) - 5  # the new data less one held-out sample per class


@pytest.mark.parametrize("layers", ["latest", "all"])
def test_the_correction_is_alpha_z_plus_beta_on_the_new_classes_logits_only(layers):
    method, tasks = bic("dataset.num_tasks=3", f"method.correction_layers={layers}")  # outputs 0-2, 3-5, 6-8
    method.alpha.copy_(torch.tensor([1.0, 0.5, 2.0]))
    method.beta.copy_(torch.tensor([0.0, 0.25, -1.0]))
    method.eval()
    x = method.info.view.eval(tasks[2].train.x[:6])
    with torch.no_grad():
        method.tasks_learned.fill_(3)
        method.heads.seen = 9
        z, got = method(x, None), method.predict(x, None)
        torch.testing.assert_close(got[:, 6:], 2.0 * z[:, 6:] - 1.0)
        assert torch.equal(got[:, :3], z[:, :3])
        if layers == "latest":  # the paper's Eq. 4 and the official code: the older classes' logits as they are
            assert torch.equal(got[:, 3:6], z[:, 3:6])
        else:  # FACIL: task 1's layer stays on its classes
            torch.testing.assert_close(got[:, 3:6], 0.5 * z[:, 3:6] + 0.25)
        method.tasks_learned.fill_(2)  # after the second task: its classes are the new ones
        method.heads.seen = 6
        z, got = method(x, None), method.predict(x, None)
        torch.testing.assert_close(got[:, 3:], 0.5 * z[:, 3:] + 0.25)
        assert torch.equal(got[:, :3], z[:, :3])


def log_softmax(z):
    return z - z.exp().sum(1, keepdim=True).log()


@pytest.mark.parametrize("layers", ["latest", "all"])
def test_stage_1_loss_by_hand(layers):
    method, tasks = bic("dataset.num_tasks=3", "method.memory_size=90", f"method.correction_layers={layers}")
    method.learn(tasks[0])
    method.learn(tasks[1])
    method.alpha[1], method.beta[1] = 0.7, -0.3  # task 1's correction, as stage 2 might have left it
    method.heads.seen = 9
    before = copy.deepcopy(method).eval()
    loss_fn = method.stage1_loss(tasks[2])
    method.eval()
    raw, y = tasks[2].train.x[:16], tasks[2].train.y[:16]
    x = method.info.view.eval(raw)
    got = loss_fn(Batch(raw, x, y, torch.full_like(y, 2)))
    with torch.no_grad():
        z = before.heads.head(before.backbone(x))[:, :9]
        teacher = z[:, :6].clone()
        teacher[:, 3:6] = 0.7 * teacher[:, 3:6] - 0.3  # the pre-task network as it predicted: its newest layer
        student = z.clone()
        if layers == "all":  # FACIL: the older tasks' fixed layers on the student too
            student[:, 3:6] = 0.7 * student[:, 3:6] - 0.3
        ce = -log_softmax(student)[torch.arange(16), y].mean()
        q = (teacher / 2).exp() / (teacher / 2).exp().sum(1, keepdim=True)
        kd = -(q * log_softmax(student[:, :6] / 2)).sum(1).mean()
        lam = 6 / 9  # n old classes over n + m classes seen
    torch.testing.assert_close(got, (1 - lam) * ce + lam * kd)
    # the first task: cross-entropy alone
    first = method.stage1_loss(tasks[0])
    method.heads.seen = 3
    x0 = method.info.view.eval(tasks[0].train.x[:8])
    y0 = tasks[0].train.y[:8]
    with torch.no_grad():
        z0 = method.heads.head(method.backbone(x0))[:, :3]
    torch.testing.assert_close(first(Batch(None, x0, y0, torch.zeros_like(y0))),
                               -log_softmax(z0)[torch.arange(8), y0].mean())


def test_stage_2_first_step_by_hand(monkeypatch):
    # one epoch of one batch: α and β take one SGD step from (1, 0) on the held-out samples' frozen logits
    method, tasks = bic("method.memory_size=100", "dataset.num_tasks=2", "method.bias_epochs=1",
                        "method.batch_size=64", "method.bias_lr=0.5")
    method.learn(tasks[0])
    expected = {}
    correct_bias = method.correct_bias

    def by_hand_then_fit(task):
        held = method.held_out()
        method.eval()
        with torch.no_grad():
            z = method.heads.head(method.backbone(method.info.view.eval(held.x)))[:, :10]
        p = log_softmax(z).exp()
        onehot = torch.nn.functional.one_hot(held.y, 10).float()
        # d/dα and d/dβ of the mean cross-entropy of [z_old, α z_new + β] at α = 1, β = 0 (β's L2 term is 0 there)
        grad_alpha = ((p - onehot)[:, 5:] * z[:, 5:]).sum(1).mean()
        grad_beta = (p - onehot)[:, 5:].sum(1).mean()
        expected["alpha"], expected["beta"] = 1 - 0.5 * grad_alpha, -0.5 * grad_beta
        method.train()
        correct_bias(task)

    monkeypatch.setattr(method, "correct_bias", by_hand_then_fit)
    method.learn(tasks[1])
    assert len(method.held_out()) == 10 <= 64
    torch.testing.assert_close(method.alpha[1], expected["alpha"])
    torch.testing.assert_close(method.beta[1], expected["beta"])


def test_beta_l2_pulls_beta_towards_zero():
    # stage 2 with β's L2 weight huge: β stays near 0 while α still moves
    method, tasks = bic("method.memory_size=100", "dataset.num_tasks=2", "method.bias_epochs=20",
                        "method.beta_l2=1000", "method.bias_lr=0.0005")
    free, _ = bic("method.memory_size=100", "dataset.num_tasks=2", "method.bias_epochs=20",
                  "method.beta_l2=0", "method.bias_lr=0.0005")
    for m in (method, free):
        m.learn(tasks[0])
        m.learn(tasks[1])
    assert abs(float(method.beta[1])) < abs(float(free.beta[1])) / 10


def test_checks_and_refusals():
    with pytest.raises(UserError, match="method.val_fraction"):
        BiCConfig(val_fraction=0.0)
    with pytest.raises(UserError, match="method.bias_epochs"):
        BiCConfig(bias_epochs=0)
    with pytest.raises(UserError, match=r"method.memory_size=15 leaves no exemplar .* use at least 20"):
        bic("method.memory_size=15")
    method, _ = bic("method.memory_size=100")
    shared = replace(method.info, offsets=[0] * 5, task_classes=[[0, 1]] * 5)
    with pytest.raises(UserError, match="share their labels"):
        BiC(method.cfg, method.backbone, shared, method.ctx)


@pytest.mark.slow
def test_a_run_stopped_after_stage_1_resumes_to_the_same_metrics(tmp_path_factory, worker_id, tmp_path, monkeypatch):
    # stopped after stage 1's last epoch of the second task: the resume fits the correction and herds as before
    case = (["method=bic", "scenario=class", "backbone=mlp", "backbone.hidden_sizes=[16]", "method.memory_size=100",
             "method.bias_epochs=5"], (1, 0, 1))
    monkeypatch.setitem(test_within_task.CASES, "bic", case)
    test_within_task.test_a_run_stopped_within_a_task_resumes_to_the_same_metrics(tmp_path_factory, worker_id,
                                                                                  tmp_path, None, "bic")


@pytest.mark.slow  # a process; its run in the class scenario is its trial's (test_method_contract.py)
def test_the_cli_refuses_the_task_scenario(tmp_path):
    proc = cl_bench("train", f"hydra.run.dir={tmp_path / 'task'}", "logger=none", "method=bic", "scenario=task")
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "method=bic does not support scenario=task" in lines[0], proc.stderr
