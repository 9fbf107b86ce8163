"""EWC's expanded-form penalty: its value and its closed-form gradient equal those of the textbook sum over
tasks, λ/2 Σ_k Σ F_k (θ - θ*_k)², differentiated by autograd."""
import pytest
import torch
from test_online import build
from test_si_mas import assert_penalty_is


@pytest.mark.parametrize("scenario", ["task", "class"])
def test_penalty_and_its_gradient_equal_the_sum_over_tasks(scenario):
    method, _ = build("method=ewc", "method.ewc_lambda=7.5", f"scenario={scenario}")
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

    direct = 0.5 * 7.5 * sum(((f * (p - a) ** 2).sum() for anchor, fisher in zip(anchors, fishers, strict=True)
                              for p, a, f in zip(params, anchor, fisher, strict=True)), torch.zeros(()))
    assert_penalty_is(method, params, direct)
