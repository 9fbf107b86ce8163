"""EWC's expanded-form penalty: its value and its closed-form gradient equal those of the textbook sum over
tasks, λ Σ_k Σ F_k (θ - θ*_k)² (Mammoth's ewc_on, models/ewc_on.py:38) or λ/2 of it (method.penalty=half,
Kirkpatrick et al. and FACIL), differentiated by autograd; and its Fisher estimates equal the references' loops."""
import math

import pytest
import torch
import torch.nn.functional as F
from test_online import build
from test_si_mas import assert_penalty_is


@pytest.mark.parametrize("scenario, penalty, factor", [("task", "full", 1.0), ("class", "full", 1.0),
                                                       ("task", "half", 0.5)])
def test_penalty_and_its_gradient_equal_the_sum_over_tasks(scenario, penalty, factor):
    method, _ = build("method=ewc", "method.ewc_lambda=7.5", f"scenario={scenario}", f"method.penalty={penalty}")
    params = [method.get_parameter(n) for n in method.anchored]
    g = torch.Generator().manual_seed(0)
    anchors, fishers = [], []
    for _ in range(3):  # three tasks' (θ*, F), each anchored where the weights were at its end
        with torch.no_grad():
            for p in params:
                p.add_(torch.randn(p.shape, generator=g))
        fisher = {n: torch.rand(p.shape, generator=g) for n, p in zip(method.anchored, params, strict=True)}
        method._accumulate(fisher)
        anchors.append([p.detach().clone() for p in params])
        fishers.append([fisher[n] for n in method.anchored])
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn(p.shape, generator=g))

    direct = factor * 7.5 * sum(((f * (p - a) ** 2).sum() for anchor, fisher in zip(anchors, fishers, strict=True)
                              for p, a, f in zip(params, anchor, fisher, strict=True)), torch.zeros(()))
    assert_penalty_is(method, params, direct)


def mammoth_fisher(method, task, batch_size):
    """models/ewc_on.py:41-57 as written: every training sample alone through the network, the gradient of
    log p(y|x) (its loss, -nll_loss of log_softmax), squared, times exp of that log-probability; the sum divided by
    len(train_loader) * batch_size."""
    method.eval()
    fish = {n: torch.zeros_like(method.get_parameter(n)) for n in method.anchored}
    x_all, y_all = method.info.view.eval(task.train.x, task.id), method.targets(task.train.y, task.id)
    for ex, lab in zip(x_all, y_all):
        method.zero_grad(set_to_none=True)
        output = method(ex.unsqueeze(0), task.id)
        loss = -F.nll_loss(F.log_softmax(output, dim=1), lab.unsqueeze(0), reduction="none")
        exp_cond_prob = torch.mean(torch.exp(loss.detach().clone()))
        torch.mean(loss).backward()
        for n in method.anchored:
            g = method.get_parameter(n).grad
            if g is not None:
                fish[n] += exp_cond_prob * g ** 2
    loader_batches = math.ceil(len(task.train) / batch_size)
    return {n: f / (loader_batches * batch_size) for n, f in fish.items()}


def facil_fisher(method, task, batch_size):
    """FACIL's compute_fisher_matrix_diag (src/approach/ewc.py:65-97) with --fi-sampling-type true over every
    batch: squared gradients of each batch's mean cross-entropy, times the batch's size, over the sample count."""
    method.eval()
    fisher = {n: torch.zeros_like(method.get_parameter(n)) for n in method.anchored}
    for raw, y, t in task.train.batches(batch_size):
        method.zero_grad(set_to_none=True)
        F.cross_entropy(method(method.info.view.eval(raw, t), task.id), method.targets(y, task.id)).backward()
        for n in method.anchored:
            g = method.get_parameter(n).grad
            if g is not None:
                fisher[n] += g.pow(2) * len(y)
    return {n: f / len(task.train) for n, f in fisher.items()}


@pytest.mark.parametrize("scenario", ["task", "class"])
@pytest.mark.parametrize("kind", ["mammoth", "batched"])
def test_fisher_equals_the_references_loop(scenario, kind):
    """A task of split_digits whose sample count is no multiple of the batch (Mammoth's denominator rounds it up)."""
    method, tasks = build("method=ewc", f"scenario={scenario}", f"method.fisher={kind}", "method.batch_size=16")
    task = tasks[1]
    method.heads.seen = method.info.seen_outputs(task.id)  # as learn() leaves it after task 1
    assert len(task.train) % 16 != 0
    want = (mammoth_fisher if kind == "mammoth" else facil_fisher)(method, task, 16)
    got = method.fisher(task)
    for n in method.anchored:
        torch.testing.assert_close(got[n], want[n], rtol=1e-4, atol=1e-7)
    assert any(float(f.abs().sum()) > 0 for f in got.values())
