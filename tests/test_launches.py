"""Fewer launches per step (issue 46), and the same numbers: the task heads' one matmul gives the per-task heads'
logits and gradients, the online methods' foreach updates compute what their per-tensor loops did, the picking
scores take no Adam step at lr 0, and CPG's growth and goal models keep a run's channels_last layout; La-MAML's
and NCCL's aten calls per incoming batch, counted as scripts/bench.py's launches section counts them."""
import collections

import pytest
import torch
import torch.nn.functional as F
from test_online import SMALL, build
from torch import nn
from torch.overrides import TorchFunctionMode

from cl_bench import api, backbones, config, methods, recorders
from cl_bench.data import scenarios
from cl_bench.data.batches import View
from cl_bench.methods import loop
from cl_bench.methods.agem import project
from cl_bench.methods.heads import Heads
from cl_bench.methods.lamaml import MixedNet
from cl_bench.methods.online import clamped, clip_norm, sgd_step
from cl_bench.nn import calibrated, masked

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")


def compose(*overrides):
    config.register()
    return config.validate(config.compose(list(overrides)))


def task_info(sizes=(2, 3, 2), channels_last=False) -> scenarios.Info:
    offsets = [sum(sizes[:k]) for k in range(len(sizes))]
    return scenarios.Info("toy", "task", (1, 8, 8), [list(range(o, o + n)) for o, n in zip(offsets, sizes)], offsets,
                          View((0.5,), (0.25,), False, CPU, channels_last))


def per_head_mixed(heads: Heads, features, t):
    """What Heads.mixed computed before: each head on its own, concatenated, -inf outside each row's task."""
    logits = torch.cat([h(features) for h in heads.heads], dim=1)
    col = torch.arange(logits.shape[1])
    first = torch.tensor(heads.info.offsets)
    end = first + torch.tensor(heads.info.sizes)
    return logits.masked_fill(~((col >= first[t, None]) & (col < end[t, None])), float("-inf"))


HEADS_ULPS = 8  # method.fused_heads' bound (online.py): fused against per-head logits and gradients


def within_ulps(a: torch.Tensor, b: torch.Tensor, ulps: float) -> bool:
    """Whether a and b differ by at most `ulps` units in the last place of b's largest magnitude."""
    return bool((a - b).abs().max() <= ulps * torch.finfo(b.dtype).eps * b.abs().max())


@pytest.mark.parametrize(("features", "sizes"), [(16, (2, 3, 2)), (640, (5,) * 20)])
def test_the_fused_heads_give_the_per_task_heads_logits_and_gradients(features, sizes):
    """method.fused_heads (on by default): to float rounding, the sums run in another order: within HEADS_ULPS of each
    tensor's largest, at 3 small heads and at 20 heads on 640 features (measured up to 4 ulps)."""
    torch.manual_seed(0)
    heads = Heads(features, task_info(sizes))
    heads.fused = True
    x, t = torch.randn(32, features, requires_grad=True), torch.randint(0, len(sizes), (32,))
    fused, reference = heads.mixed(x, t), per_head_mixed(heads, x, t)
    finite = torch.isfinite(reference)
    assert torch.equal(torch.isfinite(fused), finite)
    assert within_ulps(fused[finite], reference[finite], HEADS_ULPS)
    params = [x, *heads.parameters()]
    y = torch.tensor(heads.info.offsets)[t] + t % 2
    for a, b in zip(torch.autograd.grad(F.cross_entropy(fused, y), params),
                    torch.autograd.grad(F.cross_entropy(reference, y), params), strict=True):
        assert within_ulps(a, b, HEADS_ULPS)
    # each head keeps its own parameters, under the keys checkpoints hold
    assert sorted(heads.state_dict()) == sorted(f"heads.{j}.{p}" for j in range(len(sizes)) for p in ("weight", "bias"))


def test_unfused_heads_and_heads_that_are_not_plain_linear_run_one_by_one():
    """Heads unfused (their class default, method.fused_heads=false), and NCCL's calibrated heads even when fused:
    each its own forward, as before, to the bit."""
    torch.manual_seed(0)
    heads = Heads(16, task_info())
    features, t = torch.randn(5, 16), torch.tensor([2, 0, 1, 1, 0])
    assert torch.equal(heads.mixed(features, t), per_head_mixed(heads, features, t))
    calibrated.convert(heads, calibrated.FCMForm.multiply)
    heads.fused = True
    assert torch.equal(heads.mixed(features, t), per_head_mixed(heads, features, t))


def test_the_online_methods_fuse_their_heads_by_default_and_run_them_apart_on_request():
    for fused, given in ((True, ()), (False, ("method.fused_heads=false",)), (True, ("method.fused_heads=true",))):
        cfg = compose("method=agem", "scenario=task", *given)
        info = task_info()
        method = methods.build(cfg.method, backbones.build(cfg.backbone, info.input_shape), info,
                               methods.Context(CPU, None, torch.Generator().manual_seed(0), recorders.Recorder()))
        assert method.heads.fused is fused


def tensors(seed: int, *shapes):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in shapes]


SHAPES = ((4, 3), (3,), (2, 2, 3, 3))


def test_the_foreach_updates_compute_what_the_per_tensor_loops_did():
    params, grads = tensors(0, *SHAPES), tensors(1, *SHAPES)
    looped = [p.clone() for p in params]
    for p, g in zip(looped, grads):
        p.sub_(g, alpha=0.1)
    sgd_step(params, grads, 0.1)
    assert all(torch.equal(a, b) for a, b in zip(params, looped))
    assert all(torch.equal(a, g.clamp(-0.5, 0.5)) for a, g in zip(clamped(grads, 0.5), grads))
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(1.0 / (norm + 1e-6), max=1.0)
    assert all(torch.equal(a, g * scale) for a, g in zip(clip_norm(grads, 1.0), grads))
    ref = tensors(2, *SHAPES)
    ref = [-r for r in grads[:1]] + ref[1:]  # a conflict: the projection acts
    dot = sum((g * r).sum() for g, r in zip(grads, ref))
    coef = torch.clamp(dot, max=0) / sum(r.pow(2).sum() for r in ref).clamp(min=1e-12)
    assert coef < 0
    assert all(torch.equal(a, g - coef * r) for a, g, r in zip(project(grads, ref), grads, ref))


class PerTaskNet(nn.Module):
    """La-MAML's net as it was before issue 73: each pass looks up its rows' task mask (Heads.mixed)."""

    def __init__(self, backbone, heads):
        super().__init__()
        self.backbone, self.heads = backbone, heads

    def forward(self, x, t):
        return self.heads.mixed(self.backbone(x), t)


@pytest.mark.parametrize("second_order", [False, True])
def test_la_mamls_inner_step_differentiates_as_the_per_tensor_one(second_order):
    """w - g·relu(α) as foreach ops: the same fast weights, and the same gradients of α and w through them."""
    cfg = compose("method=lamaml", "backbone=mlp", "backbone.hidden_sizes=[8]", f"method.second_order={second_order}",
                  "method.inner_clip=0.5")
    info = task_info()
    method = methods.build(cfg.method, backbones.build(cfg.backbone, info.input_shape), info,
                           methods.Context(CPU, None, torch.Generator().manual_seed(0), recorders.Recorder()))
    net = MixedNet(method.backbone, method.heads)
    x, y, t = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 3, 5]), torch.tensor([0, 0, 1, 2])
    with torch.no_grad():  # rates at and below 0 too, where relu's gradient is 0
        for a in method.alpha:
            a.view(-1)[::3] = 0.0
            a.view(-1)[1::5] = -0.1
    fast = method.inner_step(net, list(method.weights), x, y, net.foreign_outputs(t))
    with torch.enable_grad():
        logits = torch.func.functional_call(PerTaskNet(method.backbone, method.heads),
                                            dict(zip(method.weight_names, method.weights)), (x, t))
        grads = torch.autograd.grad(F.cross_entropy(logits, y), method.weights, create_graph=second_order,
                                    allow_unused=True, materialize_grads=True)
    reference = [w - g.clamp(-0.5, 0.5) * F.relu(a) for w, g, a in zip(method.weights, grads, method.alpha)]
    assert all(torch.equal(a, b) for a, b in zip(fast, reference))
    wrt = [*method.weights, *method.alpha]
    for a, b in zip(torch.autograd.grad(sum((f ** 2).sum() for f in fast), wrt),
                    torch.autograd.grad(sum((f ** 2).sum() for f in reference), wrt), strict=True):
        assert torch.equal(a, b)


def per_tensor_glance(method, batch, task):
    """La-MAML's glance written out per tensor, as before issue 73's first_order: w - g·relu(α) a tensor at a time,
    autograd through the whole trajectory, the clipping and the SGD steps each a loop over the tensors."""
    cfg, net = method.cfg, PerTaskNet(method.backbone, method.heads)
    order = torch.randperm(batch.y.shape[0], generator=method.ctx.generator)
    x, y, t = batch.x[order], batch.y[order], batch.t[order]
    meta_x, meta_y, meta_t = x, y, t
    if method.replay_ready:
        memory, _ = method.replay()
        meta_x, meta_y, meta_t = torch.cat((x, memory.x)), torch.cat((y, memory.y)), torch.cat((t, memory.t))
    chunk = -(-len(y) // cfg.trajectory_chunks) if cfg.trajectory_chunks else 1
    rates = [F.relu(a) if cfg.inner_relu else a for a in method.alpha]

    def loss(fast, x, y, t):
        return F.cross_entropy(torch.func.functional_call(net, dict(zip(method.weight_names, fast)), (x, t)), y)

    fast, meta_losses = list(method.weights), []
    for k in range(0, len(y), chunk):
        grads = torch.autograd.grad(loss(fast, x[k:k + chunk], y[k:k + chunk], t[k:k + chunk]), fast,
                                    create_graph=cfg.second_order, allow_unused=True, materialize_grads=True)
        if cfg.inner_clip > 0:
            grads = [g.clamp(-cfg.inner_clip, cfg.inner_clip) for g in grads]
        fast = [w - g * r for w, g, r in zip(fast, grads, rates)]
        meta_losses.append(loss(fast, meta_x, meta_y, meta_t))
    meta_loss = sum(meta_losses) / len(meta_losses)
    learned = list(method.alpha) if cfg.learn_lr else []
    grads = torch.autograd.grad(meta_loss, method.weights + learned, allow_unused=True, materialize_grads=True)

    def clipped(grads):
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        return [g * torch.clamp(cfg.grad_clip_norm / (norm + 1e-6), max=1.0) for g in grads]

    with torch.no_grad():
        weight_grads = clipped(grads[:len(method.weights)])
        for a, g in zip(learned, clipped(grads[len(method.weights):]) if learned else []):
            a.sub_(g, alpha=cfg.outer_lr)
        for w, g, a in zip(method.weights, weight_grads, method.alpha):
            w.sub_(g, alpha=cfg.weight_lr) if cfg.sync_update else w.sub_(g * F.relu(a))
    return meta_loss.detach()


@pytest.mark.parametrize("overrides", [
    (), ("scenario=class",), ("backbone=convnet",), ("method.second_order=true",),
    ("method.trajectory_chunks=3", "method.inner_relu=false", "method.inner_clip=0.05"),
    ("method.learn_lr=false", "method.sync_update=true"),
    ("method.sync_update=true", "method.memory_write=after_glances")])
def test_la_mamls_glances_end_with_the_weights_and_rates_of_the_per_tensor_glance(overrides):
    """first_order's chain rule by hand (and the second order's autograd path) against the glance written out per
    tensor: after two tasks the weights and α are bit-equal. Some rates start at and below 0, where relu cuts α's
    gradient."""
    learned = []
    for reference in (False, True):
        small = ("dataset.samples_per_task=30", "hardware=cpu") if "backbone=convnet" in overrides else SMALL
        method, tasks = build("method=lamaml", "method.inner_steps=2", "dataset.num_tasks=2",
                              *(o for o in overrides if o != "backbone=convnet"), small=small)
        with torch.no_grad():
            for a in method.alpha:
                a.view(-1)[::7] = 0.0
                a.view(-1)[1::11] = -0.05
        if reference:
            method.glance = lambda batch, task, method=method: per_tensor_glance(method, batch, task)
        for task in tasks:
            method.learn(task)
        learned.append([p.detach().clone() for p in (*method.weights, *method.alpha)])
    assert all(torch.equal(a, b) for a, b in zip(*learned, strict=True))


PIGGYBACK = ["method=piggyback", "backbone=convnet", "backbone.channels=[4,8]", "method.epochs=2", "method.lr=0.05",
             "method.lr_milestones=[]", "method.mask_lr=0.01", "dataset.num_tasks=2", "dataset.samples_per_task=64"]


def piggyback_steps(*overrides) -> tuple[int, list]:
    """Adam steps the picking scores took in task 1, and whether each step's backward reached them."""
    cfg = compose(*PIGGYBACK, *overrides)
    torch.manual_seed(0)
    scenario = scenarios.build(cfg.dataset, cfg.data, cfg.scenario, cfg.seed, CPU)
    info = scenario.info
    method = methods.build(cfg.method, backbones.build(cfg.backbone, info.input_shape), info,
                           methods.Context(CPU, None, torch.Generator().manual_seed(0), recorders.Recorder()))
    method.learn(scenario.tasks[0])
    steps, reached, adam_step, protect = [], [], torch.optim.Adam.step, method.protect
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.optim.Adam, "step", lambda opt, *a, **k: steps.append(1) or adam_step(opt, *a, **k))
        patch.setattr(method, "protect", lambda task_id: reached.append(all(
            layer.score.grad is not None for layer in method.layers if layer.score is not None)) or protect(task_id))
        method.learn(scenario.tasks[1])
    return len(steps), reached


def test_the_picking_scores_take_no_adam_step_and_no_gradient_at_lr_0():
    """Piggyback's later tasks own no weights, so their mask lr never stops: it is zeroed by its milestones here."""
    steps, reached = piggyback_steps()
    assert steps == len(reached) > 0 and all(reached)  # the mask lr is on: stepped every step
    steps, reached = piggyback_steps("method.mask_lr_gamma=0", "method.mask_lr_milestones=[0]")
    assert steps == 0  # lr 0 from the first epoch: no step; the first backward alone still reaches the scores
    assert reached[0] and not any(reached[1:])
    steps, reached = piggyback_steps("method.mask_lr_gamma=0", "method.mask_lr_milestones=[1]")
    half = len(reached) // 2  # lr 0 from the second epoch on
    assert steps == half and all(reached[:half]) and not any(reached[half:])


def conv_layer(kernel: int) -> masked.MaskedConv2d:
    torch.manual_seed(0)
    layer = masked.MaskedConv2d(nn.Conv2d(3, 8, kernel), 3, (0.01, 0.005))
    layer.claim(0)
    layer.start_picking(1)
    return layer.to(memory_format=torch.channels_last)


@pytest.mark.parametrize("kernel", [3, 1])
def test_growth_and_loading_keep_channels_last(kernel):
    layer = conv_layer(kernel)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    old = layer.weight.detach().clone()
    layer.widen(12, 5, from_task=1)
    for x in (layer.weight, layer.owner, layer.score):
        assert masked.memory_format(x) == torch.channels_last
    assert torch.equal(layer.weight[:8, :3], old)
    layer.load_state_dict(before)  # a restore to the narrower layer (CPG's growth retried)
    for x in (layer.weight, layer.owner, layer.score):
        assert masked.memory_format(x) == torch.channels_last and x.shape[:2] == (8, 3)
    assert torch.equal(layer.weight, old)
    plain = masked.MaskedConv2d(nn.Conv2d(3, 8, kernel), 3, None)
    plain.widen(12, None, from_task=0)
    assert masked.memory_format(plain.weight) == torch.contiguous_format


@pytest.mark.parametrize("channels_last", [True, False])
def test_cpgs_goal_model_takes_the_runs_memory_format(monkeypatch, channels_last):
    cfg = compose("method=cpg", "backbone=convnet", "backbone.channels=[4,8]")
    info = task_info(channels_last=channels_last)
    method = methods.build(cfg.method, backbones.build(cfg.backbone, info.input_shape), info,
                           methods.Context(CPU, None, torch.Generator().manual_seed(0), recorders.Recorder()))
    trained = {}
    monkeypatch.setattr(method.loop, "fit", lambda task, loss, model, **kwargs: iter(trained.update(model=model) or ()))
    monkeypatch.setattr(method, "accuracy", lambda *args, **kwargs: 0.5)
    task = type("Task", (), {"id": 0, "num_classes": 2, "val": None})()
    method.goal_model(task)
    convs = [m.weight for m in trained["model"].modules() if isinstance(m, nn.Conv2d)]
    want = torch.channels_last if channels_last else torch.contiguous_format
    assert convs and all(masked.memory_format(w) == want for w in convs)


@pytest.mark.parametrize(("optimizer", "extra"), [
    ("sgd", ("method.momentum=0.9", "method.nesterov=true", "method.weight_decay=5e-4")),
    ("sgd", ("method.momentum=0", "method.weight_decay=0")),
    ("adam", ("method.weight_decay=1e-4",)),
    ("adamw", ("method.weight_decay=1e-2",))])
def test_the_foreach_optimisers_step_as_torchs_per_tensor_loops(optimizer, extra):
    """hardware.fused_optimizer=false: Loop.make_optimizer builds foreach optimisers (one call for every parameter,
    where torch's CPU default loops over them): the same parameters, bit for bit, as the per-tensor loop after steps
    of gradients of every scale."""
    cfg = compose("method=finetune", f"method.optimizer={optimizer}", "method.lr=0.01", *extra)
    method = methods.build(cfg.method, backbones.build(cfg.backbone, (1, 8, 8)), task_info(),
                           methods.Context(CPU, None, torch.Generator().manual_seed(0), recorders.Recorder(),
                                           fused_optimizer=False))
    params = [p for p in method.parameters() if p.requires_grad]
    looped = [p.detach().clone().requires_grad_() for p in params]
    fast = method.loop.make_optimizer(params)
    assert all(group["foreach"] and not group["fused"] for group in fast.param_groups)
    kept = {k: v for k, v in fast.defaults.items() if k != "decoupled_weight_decay"}  # AdamW sets it itself
    slow = type(fast)(looped, **{**kept, "foreach": False})
    g = torch.Generator().manual_seed(1)
    for step in range(20):
        for p, q in zip(params, looped):
            q.grad = torch.randn(p.shape, generator=g) * 10.0 ** (step % 5 - 2)
            p.grad = q.grad.clone()
        fast.step()
        slow.step()
    assert all(torch.equal(p, q) for p, q in zip(params, looped))



FUSED_ULPS = 16  # hardware.fused_optimizer's bound (config.py): fused and foreach weights after TOLERANCE_EPOCHS


@pytest.mark.parametrize(("optimizer", "extra"), [
    ("sgd", ("method.momentum=0.9", "method.nesterov=true", "method.weight_decay=5e-4")),
    ("adam", ("method.weight_decay=1e-4",)),
    ("adamw", ("method.weight_decay=1e-2",))])
def test_the_fused_optimisers_train_the_foreach_weights_to_float_rounding(optimizer, extra):
    """hardware.fused_optimizer (on by default): a task of finetune trained with torch's fused kernels and again
    with its foreach ops (225 steps) ends with every weight within FUSED_ULPS ulps of its tensor's largest, and
    not bit-equal (the kernels round otherwise: measured up to 4 ulps)."""
    learned = []
    for fused in (None, True, False):
        torch.manual_seed(0)
        exp = api.build(compose("backbone=mlp", "backbone.hidden_sizes=[8]", "dataset.num_tasks=2", "logger=none",
                                "data.val_fraction=0", "method=finetune", f"method.optimizer={optimizer}",
                                "method.lr=0.01", "method.epochs=5", "method.batch_size=16", *extra,
                                *([] if fused is None else [f"hardware.fused_optimizer={fused}"])))
        opt = exp.method.loop.make_optimizer([p for p in exp.method.parameters() if p.requires_grad])
        assert all(group["fused"] is (fused is not False) for group in opt.param_groups)
        exp.method.learn(exp.scenario.tasks[0])
        learned.append([p.detach().clone() for p in exp.method.parameters()])
    default, fused, foreach = learned
    assert all(torch.equal(a, b) for a, b in zip(default, fused, strict=True))
    ulps = [((a - b).abs().max() / (torch.finfo(b.dtype).eps * b.abs().max())).item()
            for a, b in zip(fused, foreach, strict=True)]
    assert 0 < max(ulps) <= FUSED_ULPS, ulps


def test_fused_sgd_starts_the_momentum_of_a_parameter_whose_first_gradient_comes_late():
    """Fused SGD allocates momentum buffers only on a step where none exists; a parameter whose first gradient comes
    later starts from a zero buffer (loop.start_momentum), as foreach's copy of the gradient, to float rounding."""
    init = tensors(0, *SHAPES)
    stepped = []
    for fused in (True, False):
        params = [nn.Parameter(x.clone()) for x in init]
        opt = loop.optimizer("sgd", params, fused, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)
        g = torch.Generator().manual_seed(1)
        for step in range(10):  # parameter k has its first gradient at step k
            for k, p in enumerate(params):
                p.grad = torch.randn(p.shape, generator=g) if k <= step else None
            opt.step()
        stepped.append(params)
    for a, b in zip(*stepped, strict=True):
        assert (a - b).abs().max() <= FUSED_ULPS * torch.finfo(b.dtype).eps * b.abs().max()

# --- aten calls per incoming batch of the online methods, counted as scripts/bench.py's launches section counts ---
# On observed()'s batch (an MLP 32x32, two glances, task 1): La-MAML made 5,164 before its rates were taken once a
# glance (issue 73), 4,356 before its first-order chain rule ran in foreach ops (issue 73 again); NCCL 871 before its
# memory weights were taken once a batch and its outer step folded (issue 73); La-MAML 3,494 with its five heads
# apart (method.fused_heads=false, the default before issue 73).
LAMAML_CALLS = 2134
NCCL_CALLS = 704


def outermost_aten_calls(fn) -> collections.Counter:
    """The aten ops fn runs, by name, outside any other aten op (as called from Python), as bench.py's launches."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    calls = collections.Counter()
    for event in prof.events():
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        if event.name.startswith("aten::") and parent is None:
            calls[event.name] += 1
    return calls


class ReluOf(TorchFunctionMode):
    """Counts relu calls on the given tensors."""

    def __init__(self, tensors):
        super().__init__()
        self.ids, self.count = {id(t) for t in tensors}, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (F.relu, torch.relu) and id(args[0]) in self.ids:
            self.count += 1
        return func(*args, **(kwargs or {}))


def observed(name: str, *overrides):
    """A method after one batch of the second task (the memory holds the first's), and a call observing the next."""
    method, tasks = build(f"method={name}", "scenario=task", *overrides)
    method.learn(tasks[0])
    method.heads.seen = method.info.seen_outputs(1)
    batches = method.stream(tasks[1])
    method.observe(next(batches), tasks[1], store=True)
    batch = next(batches)
    return method, lambda: method.observe(batch, tasks[1], store=True)


def test_la_maml_takes_its_inner_rates_once_a_glance_and_no_per_tensor_negation():
    """First order (the default): the rates, their negation and α's gradient through them are foreach ops, once a
    glance; the chain rule along the trajectory too, so no aten op runs once per tensor of α."""
    method, observe = observed("lamaml", "method.inner_steps=2")
    with ReluOf(method.alpha) as relus:
        observe()
    assert relus.count == 0
    calls = outermost_aten_calls(observe)
    assert calls["aten::neg"] == calls["aten::relu"] == 0 and calls["aten::_foreach_neg"] == 2 * 2
    assert calls["aten::threshold_backward"] == calls["aten::relu_"]  # the backbone's relus alone
    assert sum(calls.values()) <= LAMAML_CALLS, sum(calls.values())


def test_la_mamls_second_order_takes_its_inner_rates_once_a_glance():
    """Second order runs autograd through the trajectory: relu(α) once per glance, not once per inner step; and
    w + g·(-rate) negates α's gradient once per glance, in the backward of -rate (w - g·rate negated each step's)."""
    method, observe = observed("lamaml", "method.inner_steps=2", "method.second_order=true")
    with ReluOf(method.alpha) as relus:
        observe()
    assert relus.count == 2 * len(method.alpha)  # 2 glances over trajectories of 10 one-sample steps
    calls = outermost_aten_calls(observe)
    inner_steps = 2 * 10  # each differentiates its cross-entropy's backward, which negates once
    assert calls["aten::neg"] == 2 * len(method.alpha) + inner_steps and calls["aten::_foreach_neg"] == 2


def test_nccls_per_batch_aten_calls_stay_bounded():
    _, observe = observed("nccl", "method.inner_steps=2")
    calls = sum(outermost_aten_calls(observe).values())
    assert calls <= NCCL_CALLS, calls
