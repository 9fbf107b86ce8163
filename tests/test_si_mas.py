"""SI and MAS: their importances against hand computations, their re-anchored expanded-form penalties (value and
closed-form gradient) against the textbook penalty differentiated by autograd, and both through the real CLI."""
import copy

import pytest
import torch
import torch.nn.functional as F
from test_online import build
from torch.func import functional_call

from cl_bench.methods.mas import MAS
from cl_bench.methods.si import SI

pytestmark = pytest.mark.usefixtures("one_thread")


def perturb(params, g, scale=1.0):
    with torch.no_grad():
        for p in params:
            p.add_(scale * torch.randn(p.shape, generator=g))


def check_penalty(method, strength, omega, anchor):
    """method.penalty() and penalty_grad() equal strength Σ Ω (θ - θ*)² and its autograd gradient."""
    params = method.anchored_params()
    direct = strength * sum(((o * (p - a) ** 2).sum() for p, o, a in zip(params, omega, anchor, strict=True)),
                            torch.zeros(()))
    assert_penalty_is(method, params, direct)


def assert_penalty_is(method, params, direct):
    """method.penalty() equals the textbook penalty `direct`, and penalty_grad() adds its autograd gradient to
    the gradient already there."""
    want = torch.autograd.grad(direct, params)
    assert method.penalty().item() == pytest.approx(direct.item(), rel=1e-5)
    method.zero_grad(set_to_none=True)
    params[0].grad = torch.ones_like(params[0])  # a gradient from the loss is added to, not replaced
    method.penalty_grad()
    for i, (p, w) in enumerate(zip(params, want, strict=True)):
        torch.testing.assert_close(p.grad, w + 1 if i == 0 else w, rtol=1e-5, atol=1e-4)


# --- SI ------------------------------------------------------------------------------------------------------------

def test_si_path_integral_and_importance_equal_two_sgd_steps_done_by_hand():
    """Task 1 trains in exactly two plain SGD steps under task 0's penalty, from weights moved off its anchor.
    By hand: each step's gradient of the task loss alone g_k, the update θ_k+1 = θ_k - lr (g_k + ∇ c Σ Ω_0
    (θ - θ*_0)²), ω = -Σ g_k·(θ_k+1 - θ_k), Ω = max(0, Ω_0 + ω / ((θ_2 - θ_0)² + ξ)); the penalty afterwards is
    c Σ Ω (θ - θ_2)²."""
    c, xi, lr = 20.0, 0.05, 0.1
    method, tasks = build("method=si", f"method.c={c}", f"method.xi={xi}", f"method.lr={lr}", "method.momentum=0",
                          "method.epochs=1", "method.batch_size=20")
    method.learn(tasks[0])
    names, params = method.anchored, method.anchored_params()
    assert -(-len(tasks[1].train) // 20) == 2, "two steps"
    omega0 = {n: a.clone() for n, a in method.total_importance().items()}
    assert all((o >= 0).all() for o in omega0.values()) and any((o > 0).any() for o in omega0.values())
    anchor0 = {n: p.detach().clone() for n, p in zip(names, params, strict=True)}
    perturb(params, torch.Generator().manual_seed(1), 0.05)  # the penalty pulls from the first step on
    start = {n: p.detach().clone() for n, p in zip(names, params, strict=True)}
    reference = copy.deepcopy(method)
    rng = method.ctx.generator.get_state()

    method.learn(tasks[1])

    g = torch.Generator().set_state(rng)
    theta = dict(start)
    omega = {n: torch.zeros_like(t) for n, t in theta.items()}
    for raw, y, _ in tasks[1].train.batches(20, g):
        x = method.info.view.train(raw, g)
        leaves = {n: t.clone().requires_grad_() for n, t in theta.items()}
        loss = F.cross_entropy(functional_call(reference, leaves, (x, 1)), method.targets(y, 1))
        inputs = [leaves[n] for n in names]
        grads = dict(zip(names, torch.autograd.grad(loss, inputs, materialize_grads=True), strict=True))
        penalty = c * sum((omega0[n] * (leaves[n] - anchor0[n]) ** 2).sum() for n in names)
        pgrads = dict(zip(names, torch.autograd.grad(penalty, inputs), strict=True))
        new = {n: theta[n] - lr * (grads[n] + pgrads[n]) for n in names}
        for n in names:
            omega[n] -= grads[n] * (new[n] - theta[n])
        theta = new

    for n, p in zip(names, params, strict=True):
        torch.testing.assert_close(p.detach(), theta[n], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(getattr(method, method._key("omega", n)), omega[n], rtol=1e-4, atol=1e-9)
    want = {n: (omega0[n] + omega[n] / ((theta[n] - start[n]) ** 2 + xi)).clamp(min=0) for n in names}
    for n, a in method.total_importance().items():
        torch.testing.assert_close(a, want[n], rtol=1e-4, atol=1e-7)
    perturb(params, torch.Generator().manual_seed(0), 0.1)  # away from the anchor, where the value is ~0
    check_penalty(method, c, [want[n] for n in names], [theta[n] for n in names])


@pytest.mark.parametrize("scenario", ["task", "class"])
def test_si_penalty_reanchored_over_two_tasks_equals_the_textbook_one(scenario):
    """Two tasks' ω (some negative) at random weights: Ω_1 = max(0, ω_1 / (Δ_1² + ξ)),
    Ω = max(0, Ω_1 + ω_2 / (Δ_2² + ξ)), anchored at the weights at the end of task 2 alone."""
    method, _ = build("method=si", "method.c=0.7", "method.xi=0.3", f"scenario={scenario}")
    names, params = method.anchored, method.anchored_params()
    g = torch.Generator().manual_seed(0)
    omega = [torch.zeros_like(p) for p in params]
    for _ in range(2):
        start = [p.detach().clone() for p in params]
        ws = [torch.randn(p.shape, generator=g) for p in params]
        with torch.no_grad():
            for n, s, w in zip(names, start, ws, strict=True):
                getattr(method, method._key("start", n)).copy_(s)
                getattr(method, method._key("omega", n)).copy_(w)
        perturb(params, g)
        method.consolidate(None)
        new = [(w / ((p.detach() - s) ** 2 + 0.3)) for p, s, w in zip(params, start, ws, strict=True)]
        omega = [(o + x).clamp(min=0) for o, x in zip(omega, new, strict=True)]
    anchor = [p.detach().clone() for p in params]
    assert any((o == 0).any() for o in omega), "the clip at zero is exercised"
    perturb(params, g)
    check_penalty(method, 0.7, omega, anchor)


# --- MAS -----------------------------------------------------------------------------------------------------------

def test_mas_importance_of_a_linear_model_is_the_mean_absolute_per_sample_gradient():
    """f(x) = W x + b (no hidden layer): ∂||f||² / ∂W = 2 f xᵀ and ∂||f||² / ∂b = 2 f, per sample."""
    method, tasks = build("method=mas", "backbone.hidden_sizes=[]", "method.batch_size=7")
    task = tasks[1]
    head = method.heads.heads[1]
    x = method.info.view.eval(task.train.x).flatten(1)
    with torch.no_grad():
        f = x @ head.weight.T + head.bias
    want_w = (2 * f[:, :, None] * x[:, None, :]).abs().mean(0)
    want_b = (2 * f).abs().mean(0)
    got = method.output_importance(task)
    torch.testing.assert_close(got["heads.heads.1.weight"], want_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got["heads.heads.1.bias"], want_b, rtol=1e-5, atol=1e-6)
    assert not got["heads.heads.0.weight"].any(), "another task's head plays no part in this task's output"


@pytest.mark.parametrize("scenario", ["task", "class"])
def test_mas_importance_equals_autograd_one_sample_at_a_time(scenario):
    method, tasks = build("method=mas", "method.batch_size=16", f"scenario={scenario}")
    task = tasks[1]
    method.heads.seen = method.info.seen_outputs(task.id)
    want = {n: torch.zeros_like(p) for n, p in zip(method.anchored, method.anchored_params(), strict=True)}
    method.eval()
    for x in method.info.view.eval(task.train.x):
        method.zero_grad(set_to_none=True)
        method(x[None], task.id).pow(2).sum().backward()
        for n, p in zip(method.anchored, method.anchored_params(), strict=True):
            if p.grad is not None:
                want[n] += p.grad.abs()
    method.zero_grad(set_to_none=True)
    got = method.output_importance(task)
    for n in method.anchored:
        torch.testing.assert_close(got[n], want[n] / len(task.train), rtol=1e-4, atol=1e-7)


def test_mas_importance_per_batch_is_the_absolute_gradient_of_each_batchs_summed_norms():
    """method.per_sample=false (the authors' split MNIST script): 1/N Σ_batches |∂ Σ_(x in batch) ||f(x)||² / ∂θ|."""
    method, tasks = build("method=mas", "method.per_sample=false", "method.batch_size=16", "scenario=class")
    task = tasks[1]
    method.heads.seen = method.info.seen_outputs(task.id)
    want = {n: torch.zeros_like(p) for n, p in zip(method.anchored, method.anchored_params(), strict=True)}
    method.eval()
    for x in method.info.view.eval(task.train.x).split(16):
        method.zero_grad(set_to_none=True)
        method(x, task.id).pow(2).sum().backward()
        for n, p in zip(method.anchored, method.anchored_params(), strict=True):
            want[n] += p.grad.abs()
    method.zero_grad(set_to_none=True)
    got = method.output_importance(task)
    for n in method.anchored:
        torch.testing.assert_close(got[n], want[n] / len(task.train), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize(("scenario", "alpha"), [("task", None), ("class", None), ("class", 0.25)])
def test_mas_penalty_reanchored_over_two_tasks_equals_the_textbook_one(monkeypatch, scenario, alpha):
    """Ω = Ω_1 + Ω_2 (the authors' code), or α Ω_1 + (1 - α) Ω_2 from Ω = (1 - α) Ω_1 after the first task
    (FACIL's fusion), anchored at the weights at the end of task 2: λ Σ Ω (θ - θ*_2)²."""
    method, _ = build("method=mas", "method.mas_lambda=2.5", f"scenario={scenario}",
                      *([f"method.alpha={alpha}"] if alpha is not None else []))
    names, params = method.anchored, method.anchored_params()
    g = torch.Generator().manual_seed(1)
    draws = []
    for _ in range(2):
        perturb(params, g)
        imp = {n: torch.rand(p.shape, generator=g) for n, p in zip(names, params, strict=True)}
        draws.append([imp[n] for n in names])
        monkeypatch.setattr(method, "output_importance", lambda task, imp=imp: imp)
        method.consolidate(None)
    anchor = [p.detach().clone() for p in params]
    if alpha is None:
        omega = [a + b for a, b in zip(*draws, strict=True)]
    else:
        omega = [alpha * (1 - alpha) * a + (1 - alpha) * b for a, b in zip(*draws, strict=True)]
    perturb(params, g)
    check_penalty(method, 2.5, omega, anchor)


# --- the shared base -----------------------------------------------------------------------------------------------

def test_ewc_si_and_mas_share_one_penalty_implementation():
    from cl_bench.methods.ewc import EWC
    from cl_bench.methods.quadratic import QuadraticPenalty
    for cls in (EWC, SI, MAS):
        assert issubclass(cls, QuadraticPenalty)
        assert "penalty" not in vars(cls) and "penalty_grad" not in vars(cls)


def test_si_and_mas_state_survives_a_checkpoint():
    """The running importance, its anchor, and SI's path integral of the task in training are buffers."""
    for name, kinds in (("si", ("A", "B", "omega", "start")), ("mas", ("A", "B"))):
        method, _ = build(f"method={name}")
        keys = set(method.state_dict())
        for n in method.anchored:
            assert {method._key(k, n) for k in kinds} <= keys
        assert "C" in keys
        assert not any("_grad_" in k or "_before_" in k for k in keys), "per-step scratch is not state"


# Their runs in each scenario through train.run, the contract and learning above chance: their trials
# (test_method_contract.py)
