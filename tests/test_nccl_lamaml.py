"""NCCL as the seed's code and La-MAML as its official code (montrealrobotics/La-MAML), point by point: the
penalty's reference, the outer objective, the glances, the separate forwards, the seed's residual block; La-MAML's
batch norm, trajectory, C-MAML and Sync; La-MAML's A-GEM and ER; GEM's rotations; the pc_cnn."""
import copy
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from test_online import build, snapshot
from torch import nn

from cl_bench import backbones, config
from cl_bench.backbones.resnet import BasicBlock
from cl_bench.data import scenarios
from cl_bench.errors import UserError
from cl_bench.methods.base import Batch
from cl_bench.methods.nccl import penalty_psi_grads
from cl_bench.methods.online import clip_norm, soft_kl
from cl_bench.nn import calibrated

pytestmark = pytest.mark.usefixtures("one_thread")
CONVNET = ("backbone=convnet", "backbone.channels=[4,8]", "dataset.samples_per_task=80", "hardware=cpu")
RESNET = ("backbone=resnet18_reduced", "backbone.nf=4", "dataset.samples_per_task=40", "hardware=cpu")


def first_batch(method, task, n=10):
    raw, y, t = next(task.train.batches(n))
    return Batch(raw, method.info.view.train(raw), y, t)


def calibrated_weights(method):
    return [layer.calibrated_weight().detach().clone() for layer in method.layers]


# --- NCCL -----------------------------------------------------------------------------------------------------

def test_penalty_reference_is_the_calibrated_weights_one_inner_step_old():
    method, tasks = build("method=nccl", "method.inner_steps=3")
    method.learn(tasks[0])
    method.train()
    at_start, seen = [], {}
    inner_step = method.inner_step

    def recording_inner_step(batch, task, pool):
        at_start.append(calibrated_weights(method))
        return inner_step(batch, task, pool)

    method.inner_step = recording_inner_step
    method.outer_step = lambda task, before, pool: seen.update(before=before)
    method.observe(first_batch(method, tasks[1]), tasks[1], store=False)
    assert len(at_start) == 3
    assert all(torch.equal(a, b) for a, b in zip(seen["before"], at_start[-1]))  # the start of the last step
    assert not all(torch.equal(a, b) for a, b in zip(seen["before"], at_start[0]))  # not the start of the first


@pytest.mark.parametrize("objective", ["seed", "paper"])
def test_outer_step_descends_the_penalty_alone_in_the_seed_and_adds_beta_kl_in_the_paper(objective):
    method, tasks = build("method=nccl", "method.inner_steps=1", f"method.outer_objective={objective}",
                          "method.beta=3.0")
    method.learn(tasks[0])
    method.train()
    task = tasks[1]
    state = method.ctx.generator.get_state()
    memory, stored = method.replay(before_task=task.id)  # the draw outer_step will make
    kl = method.cfg.reg * soft_kl(method.mixed_logits(memory.x, memory.t), stored, method.cfg.temperature)
    kl_grads = torch.autograd.grad(kl, method.calibration_params, allow_unused=True, materialize_grads=True)
    method.ctx.generator.set_state(state)
    calib0 = snapshot(method.calibration_params)
    # θ̃ = θ̃_old: the penalty and its gradient are 0
    method.outer_step(task, calibrated_weights(method), method.pool(task))
    moved = [b - a for a, b in zip(calib0, method.calibration_params)]
    if objective == "seed":  # the seed's ewc_loss.backward(): nothing but the penalty reaches the calibration
        assert all(torch.equal(d, torch.zeros_like(d)) for d in moved)
    else:  # Eq. 5: ½ penalty + β·KL
        assert any(g.abs().max() > 0 for g in kl_grads)
        for d, g in zip(moved, kl_grads):
            torch.testing.assert_close(d, -method.cfg.outer_lr * method.cfg.beta * g)


def test_glances_after_the_first_read_current_task_memory_once_enough_is_stored():
    method, tasks = build("method=nccl", "method.inner_steps=3", "method.batch_size=10")
    task = tasks[1]
    batch = first_batch(method, task)
    for step in (1, 2):  # no sample of task 1 stored yet: the incoming batch again
        assert torch.equal(method.glance_batch(batch, task, step, method.pool(task)).raw, batch.raw)
    assert method.glance_batch(batch, task, 0, method.pool(task)) is batch
    stored = task.train.x[10:35]  # 25 other samples of task 1, with task 0's before them
    method.memory.add(tasks[0].train.x, tasks[0].train.y, tasks[0].train.t)
    method.memory.add(stored, task.train.y[10:35], task.train.t[10:35])
    for step in (1, 2):  # 25 >= 10 and >= 20
        drawn = method.glance_batch(batch, task, step, method.pool(task))
        assert drawn.raw.shape == batch.raw.shape and (drawn.t == task.id).all()
        assert all((row == stored).flatten(1).all(1).any() for row in drawn.raw)  # rows of task 1's memory
    assert torch.equal(method.glance_batch(batch, task, 3, method.pool(task)).raw, batch.raw)  # 25 < 30: not enough yet


def test_batch_and_memory_go_through_separate_forwards():
    method, tasks = build("method=nccl", "method.replay_batch_size=7")
    method.learn(tasks[0])
    sizes = []
    method.backbone.register_forward_pre_hook(lambda module, args: sizes.append(args[0].shape[0]))
    method.inner_loss(first_batch(method, tasks[1]), tasks[1], method.pool(tasks[1]))
    assert sorted(sizes) == [7, 10]


@pytest.mark.parametrize("form", ["seed", "standard"])
def test_the_seeds_residual_block_adds_the_shortcut_after_the_activation_uncalibrated(form):
    method, _ = build("method=nccl", f"method.block_form={form}", small=RESNET)
    blocks = [m for m in method.backbone.modules() if isinstance(m, BasicBlock)]
    shortcut_convs = [m for b in blocks for m in b.shortcut.children() if isinstance(m, (nn.Conv2d,
                                                                                         calibrated.Calibrated))]
    assert len(shortcut_convs) == 3
    plain = sum(isinstance(m, nn.Conv2d) for m in method.backbone.modules()) - len(calibrated.layers(method.backbone))
    if form == "seed":
        assert all(type(m) is nn.Conv2d for m in shortcut_convs) and plain == 3
    else:
        assert all(isinstance(m, calibrated.Calibrated) for m in shortcut_convs) and plain == 0
    block = blocks[2]  # one with a conv shortcut
    block.eval()
    x = torch.randn(2, block.conv1.base.weight.shape[1], 8, 8)
    inner = block.bn2(block.conv2(F.relu(block.bn1(block.conv1(x)))))
    expected = F.relu(inner) + block.shortcut(x) if form == "seed" else F.relu(inner + block.shortcut(x))
    torch.testing.assert_close(block(x), expected)



# NCCL's step before issue 73 ("fewer launches"), written out: the memory's draw weights taken at each draw, a
# per-layer Fisher and penalty, per-tensor clamps and SGD steps, every calibration parameter in the outer step.
def old_soft_kl(logits, stored, temperature):
    logits, stored = logits.float(), stored[:, : logits.shape[1]]
    own = torch.isfinite(stored) & torch.isfinite(logits)
    p = F.softmax(stored.masked_fill(~own, float("-inf")) / temperature, dim=1)
    log_q = F.log_softmax(logits.masked_fill(~own, float("-inf")) / temperature, dim=1)
    return (torch.xlogy(p, p) - p * log_q.masked_fill(~own, 0)).sum(1).mean()


def old_replay(method, task):
    mem, g = method.memory, method.ctx.generator
    valid = mem.valid()
    past = valid & (mem.t < task.id)
    idx = torch.multinomial(torch.where(past.any(), past, valid).float(), method.cfg.replay_batch_size,
                            replacement=True, generator=g)
    raw, t = mem.x[idx], mem.t[idx]
    return Batch(raw, method.info.view.train(raw, g, t), mem.y[idx], t), mem.logits[idx]


def old_glance_batch(method, batch, task, step):
    if step == 0:
        return batch
    mem, g = method.memory, method.ctx.generator
    own = mem.valid() & (mem.t == task.id)
    count = own.sum()
    weights = own.float()
    weights[mem.size] += (count == 0).float()
    idx = torch.multinomial(weights, batch.y.shape[0], replacement=True, generator=g)
    use = count >= step * method.cfg.batch_size
    raw, y, t = (torch.where(use.view(-1, *[1] * (a.dim() - 1)), a[idx], b)
                 for a, b in ((mem.x, batch.raw), (mem.y, batch.y), (mem.t, batch.t)))
    return Batch(raw, method.info.view.train(raw, g, t), y, t)


def old_sgd(params, grads, lr):
    with torch.no_grad():
        for p, grad in zip(params, grads):
            p.sub_(grad, alpha=lr)


def old_glance(method, batch, task):
    cfg = method.cfg
    loss = method.loss(batch, task.id)
    if task.id > 0:
        memory, stored = old_replay(method, task)
        z = method.mixed_logits(memory.x, memory.t)
        old = F.cross_entropy(z, memory.y) + cfg.reg * old_soft_kl(z, stored, cfg.temperature)
        loss = loss + cfg.gamma * old
    grads = torch.autograd.grad(loss, method.base_params, allow_unused=True, materialize_grads=True)
    old_sgd(method.base_params, [g.clamp(-cfg.inner_clip, cfg.inner_clip) for g in grads], cfg.inner_lr)
    return loss.detach()


def old_outer_step(method, task, before):
    cfg = method.cfg
    memory, stored = old_replay(method, task)
    kl = cfg.reg * old_soft_kl(method.mixed_logits(memory.x, memory.t), stored, cfg.temperature)
    weights = [layer.base.weight for layer in method.layers]
    weight_grads = torch.autograd.grad(kl, weights, retain_graph=True, allow_unused=True, materialize_grads=True)
    penalty = 0
    for layer, g, old in zip(method.layers, weight_grads, before):
        fisher = torch.where(layer.psi != 0, g / layer.psi, torch.zeros_like(g)).detach().pow(2)
        penalty = penalty + (fisher * (layer.calibrated_weight() - old).pow(2)).sum()
    objective = cfg.beta * cfg.reg * penalty if cfg.outer_objective == "seed" else 0.5 * penalty + cfg.beta * kl
    grads = torch.autograd.grad(objective, method.calibration_params, allow_unused=True, materialize_grads=True)
    old_sgd(method.calibration_params, grads, cfg.outer_lr)


def old_observe(method, batch, task, store):
    before = None
    for step in range(method.cfg.inner_steps):
        if task.id > 0 and step == method.cfg.inner_steps - 1:
            with torch.no_grad():
                before = [layer.calibrated_weight() for layer in method.layers]
        loss = old_glance(method, old_glance_batch(method, batch, task, step), task)
    if before is not None:
        old_outer_step(method, task, before)
    if store:
        method.remember(batch)
    return loss


@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_the_seed_penalty_gradient_is_autograds_to_the_bit(scale):
    """penalty_psi_grads against autograd's backward of the penalty, per layer as NCCL's step wrote it: a 3x3 conv,
    a 1x1 conv (ψ as wide as θ) and a linear layer, ψ with zeros."""
    g = torch.Generator().manual_seed(0)
    shapes = [((6, 4, 3, 3), (6, 4, 1, 1)), ((5, 6, 1, 1), (5, 6, 1, 1)), ((3, 7), (3, 1))]
    weights = [torch.randn(w, generator=g) for w, _ in shapes]
    psis = [(torch.rand(p, generator=g) + 0.5).masked_fill(torch.rand(p, generator=g) < 0.2, 0.0).requires_grad_()
            for _, p in shapes]
    before = [w * p.detach() + 0.01 * torch.randn(w.shape, generator=g) for w, p in zip(weights, psis)]
    fisher = [torch.rand(w.shape, generator=g) for w in weights]
    penalty = sum((f * (w * p - b).pow(2)).sum() for f, w, p, b in zip(fisher, weights, psis, before))
    want = torch.autograd.grad(scale * penalty, psis)  # the old step: beta * reg * penalty
    with torch.no_grad():
        moved = [w * p - b for w, p, b in zip(weights, psis, before)]
        got = penalty_psi_grads(fisher, moved, weights, psis, scale)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize("overrides", [("method.outer_lr=1000",),  # seed objective, reg = β = 1: no scaling
                                       ("method.outer_lr=1000", "method.beta=3.0"),
                                       ("method.outer_objective=paper", "method.reg=0.5", "method.beta=3.0")])
def test_nccls_folded_step_ends_bit_equal_to_the_per_parameter_one(overrides):
    """Five incoming batches of task 1 (three glances each, the later ones reading task 1's memory once it holds
    enough), from one state: the same losses, weights, calibration, batch-norm statistics, memory and generator."""
    method, tasks = build("method=nccl", "method.inner_steps=3", *overrides, small=CONVNET)
    method.learn(tasks[0])
    method.train()
    with torch.no_grad():  # a ψ of 0, where the Fisher is 0
        method.layers[1].psi.view(-1)[::5] = 0.0
    start, generator = copy.deepcopy(method.state_dict()), method.ctx.generator.get_state()
    batches = [Batch(raw, method.info.view.train(raw), y, t) for raw, y, t in tasks[1].train.batches(10)][:5]
    runs = []
    for observe in (method.observe, partial(old_observe, method)):
        method.load_state_dict(start)
        method.ctx.generator.set_state(generator)
        losses = []
        for batch in batches:
            method.train()  # as learn_pass: remember() leaves the method in eval mode
            losses.append(observe(batch, tasks[1], store=True))
        runs.append((losses, copy.deepcopy(method.state_dict()), method.ctx.generator.get_state()))
    (new, new_state, new_gen), (old, old_state, old_gen) = runs
    assert all(torch.equal(a, b) for a, b in zip(new, old, strict=True))
    assert new_state.keys() == old_state.keys() and all(torch.equal(new_state[k], old_state[k]) for k in new_state)
    assert torch.equal(new_gen, old_gen)
    assert (method.memory.t == 1).sum() >= 20  # the later glances read task 1's memory
    psis = [k for k in new_state if k.startswith("backbone") and k.endswith(".psi")]
    moved = [not torch.equal(new_state[k], start[k]) for k in psis]
    assert moved and all(moved)  # the outer steps moved every ψ of the backbone


# --- La-MAML --------------------------------------------------------------------------------------------------

def test_lamaml_fast_weight_passes_leave_batch_norm_statistics_alone():
    method, tasks = build("method=lamaml", "method.inner_steps=1", small=RESNET)
    norms = [m for m in method.modules() if isinstance(m, nn.BatchNorm2d)]
    stats0 = [snapshot(m.buffers()) for m in norms]
    weights0 = snapshot(method.weights)
    method.train()
    assert all(not m.training for m in norms) and method.backbone.training
    method.glance(first_batch(method, tasks[0]), tasks[0])
    assert any(not torch.equal(a, b) for a, b in zip(weights0, method.weights))  # it did learn
    assert all(torch.equal(a, b) for s, m in zip(stats0, norms) for a, b in zip(s, m.buffers()))


def test_lamaml_trajectory_in_chunks():
    method, tasks = build("method=lamaml", "method.trajectory_chunks=5", "method.batch_size=10")
    sizes = []
    inner_step = method.inner_step
    method.inner_step = lambda net, fast, x, *rest: sizes.append(x.shape[0]) or inner_step(net, fast, x, *rest)
    method.glance(first_batch(method, tasks[0]), tasks[0])
    assert sizes == [2] * 5
    per_sample, tasks = build("method=lamaml", "method.batch_size=10")
    sizes.clear()
    per_sample.inner_step = lambda net, fast, x, *rest: sizes.append(x.shape[0]) or fast
    per_sample.glance(first_batch(per_sample, tasks[0]), tasks[0])
    assert sizes == [1] * 10  # the MNIST code: one sample a step


@pytest.mark.parametrize("inner_relu", [True, False])
def test_lamaml_inner_step_with_and_without_the_relu(inner_relu):
    method, tasks = build("method=lamaml", f"method.inner_relu={str(inner_relu).lower()}")
    with torch.no_grad():
        for a in method.alpha:
            a.fill_(-0.1)
    batch = first_batch(method, tasks[0], 2)
    from cl_bench.methods.lamaml import MixedNet
    fast = method.inner_step(MixedNet(method.backbone, method.heads), list(method.weights), batch.x, batch.y, batch.t)
    unchanged = all(torch.equal(f, w) for f, w in zip(fast, method.weights))
    assert unchanged == inner_relu  # relu(-0.1) = 0 steps nowhere; -0.1 steps uphill, as the CIFAR code allows


def test_cmaml_keeps_its_learning_rates_and_sync_steps_by_weight_lr():
    def glance_once(*overrides):
        torch.manual_seed(0)
        method, tasks = build("method=lamaml", *overrides)
        alpha0 = snapshot(method.alpha)
        method.train()
        method.glance(first_batch(method, tasks[0]), tasks[0])
        return method, alpha0

    cmaml, alpha0 = glance_once("method.learn_lr=false", "method.alpha_init=0.05")
    assert all(torch.equal(a, b) for a, b in zip(alpha0, cmaml.alpha))
    sync, _ = glance_once("method.learn_lr=false", "method.alpha_init=0.05", "method.sync_update=true",
                          "method.weight_lr=0.05")
    # With α fixed at 0.05 everywhere, La-MAML's step -relu(α)·∇ and Sync's SGD step of lr 0.05 coincide.
    for a, b in zip(cmaml.weights, sync.weights):
        torch.testing.assert_close(a, b)
    learned, alpha0 = glance_once("method.sync_update=true")
    assert any(not torch.equal(a, b) for a, b in zip(alpha0, learned.alpha))


def test_lamaml_refuses_knobs_its_variant_does_not_read():
    config.register()
    with pytest.raises(UserError, match="method.weight_lr=0.3 .* read only with method.sync_update=true"):
        config.validate(config.compose(["method=lamaml", "method.weight_lr=0.3"]))
    with pytest.raises(UserError, match="method.outer_lr=0.1 .*method.learn_lr=false"):
        config.validate(config.compose(["method=lamaml", "method.learn_lr=false", "method.outer_lr=0.1"]))


@pytest.mark.parametrize("method_name", ["lamaml", "nccl"])
def test_multi_pass_replays_the_stream_and_stores_it_once(method_name):
    method, tasks = build(f"method={method_name}", "method.epochs=2", "method.inner_steps=1")
    calls = []
    observe = method.observe
    method.observe = lambda batch, task, store: calls.append(batch.y.shape[0]) or observe(batch, task, store)
    method.learn(tasks[0])
    assert sum(calls) == 2 * len(tasks[0].train)
    assert int(method.memory.seen) == len(tasks[0].train)


@pytest.mark.parametrize("write, first_replay", [("first_glance", 1), ("after_glances", None)])
def test_lamaml_writes_the_batch_into_the_memory_during_its_first_glance(write, first_replay):
    """La-MAML's push_to_mem runs at pass_itr 0, after that glance drew its meta batch: on the stream's very first
    batch the memory is empty for glance 0 and holds the batch from glance 1 on (memory_write=first_glance); with
    after_glances no glance of that batch replays."""
    method, tasks = build("method=lamaml", "method.inner_steps=3", f"method.memory_write={write}")
    method.train()
    stored_at_glance = []
    glance = method.glance

    def recording_glance(batch, task):
        stored_at_glance.append((int(method.memory.seen), method.replay_ready))
        return glance(batch, task)

    method.glance = recording_glance
    batch = first_batch(method, tasks[0])
    method.replay_ready = False  # the stream's first batch
    method.observe(batch, tasks[0], store=True)
    replaying = [k for k, (_, ready) in enumerate(stored_at_glance) if ready]
    assert (replaying[0] if replaying else None) == first_replay
    if write == "first_glance":
        assert stored_at_glance == [(0, False), (10, True), (10, True)]
    assert int(method.memory.seen) == 10  # stored once either way


# --- La-MAML's A-GEM and ER -----------------------------------------------------------------------------------

def test_agem_per_task_reference_is_the_mean_of_each_past_tasks_clipped_gradient():
    method, tasks = build("method=agem", "method.memory_policy=ring", "method.memory_size=50",
                          "method.reference=per_task", "method.grad_clip_norm=0.5")
    for task in tasks[:3]:
        method.learn(task)
    method.train()
    valid = method.memory.valid()
    expected = []
    for j in range(3):
        rows = valid & (method.memory.t == j)
        assert int(rows.sum()) == 10  # 50 // 5 tasks, full
        x = method.info.view.train(method.memory.x[rows])
        logits = method.mixed_outputs(method.backbone(x), method.memory.t[rows], method.cfg.ce_outputs)
        grads = torch.autograd.grad(F.cross_entropy(logits, method.memory.y[rows]), method.params,
                                    allow_unused=True, materialize_grads=True)
        expected.append(clip_norm(grads, 0.5))
    ref = method.per_task_reference(tasks[3])
    assert torch.linalg.vector_norm(torch.cat([g.flatten() for g in expected[0]])) <= 0.5 + 1e-5
    for k, r in enumerate(ref):
        torch.testing.assert_close(r, sum(e[k] for e in expected) / 3)


def test_agem_per_task_reference_needs_the_ring_memory():
    with pytest.raises(UserError, match="memory_policy=ring"):
        build("method=agem", "method.reference=per_task")


def test_er_as_la_mamls_glances_clipping_and_replay_from_the_start(monkeypatch):
    method, tasks = build("method=er", "method.glances=2", "method.replay_in_first_task=true",
                          "method.replay_draw=replacement", "method.batch_size=10", "method.epochs=1",
                          "method.optimizer=sgd", "method.momentum=0", "method.lr=1.0", "method.grad_clip_norm=1e-4")
    draws = []
    sample = method.memory.sample
    method.memory.sample = lambda *a, **k: draws.append(1) or sample(*a, **k)
    before = snapshot(p for p in method.parameters() if p.requires_grad)
    method.learn(tasks[0])
    batches = -(-len(tasks[0].train) // 10)
    assert len(draws) == 2 * (batches - 1)  # every glance but those of the first batch (an empty memory)
    after = [p for p in method.parameters() if p.requires_grad]
    moved = torch.linalg.vector_norm(torch.cat([(b - a).flatten() for a, b in zip(before, after)]))
    assert 0 < moved <= 1.0 * 1e-4 * 2 * batches * (1 + 1e-4)  # each of the 2·batches steps at most lr·clip
    default, tasks = build("method=er", "method.epochs=1")
    draws.clear()
    sample = default.memory.sample_distinct  # the default draw (Mammoth's)
    default.memory.sample_distinct = lambda *a, **k: draws.append(1) or sample(*a, **k)
    default.learn(tasks[0])
    assert draws == []  # Mammoth's ER: no replay during task 0


# --- protocols ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rotation", ["gem", "even"])
def test_rotation_angles_fall_inside_their_slots(monkeypatch, rotation):
    from torchvision.transforms.v2 import functional as TF
    seen = []
    rotate = TF.rotate
    monkeypatch.setattr(TF, "rotate", lambda x, angle, interpolation: seen.append((angle, interpolation)) or
                        rotate(x, angle, interpolation=interpolation))
    config.register()
    angles = {}
    for seed in (0, 1):
        cfg = config.compose(["dataset=split_digits", "dataset.kind=rotated", "dataset.num_tasks=6",
                              f"dataset.rotation={rotation}", f"seed={seed}"])
        seen.clear()
        scenarios.build(cfg.dataset, cfg.data, "class", cfg.seed, torch.device("cpu"))
        per_task = seen[::3]  # train, val and test splits of a task share its angle
        assert [a for a, _ in seen] == [a for a, _ in per_task for _ in range(3)]
        angles[seed] = [a for a, _ in per_task]
        for t, (angle, mode) in enumerate(per_task):
            if rotation == "gem":
                assert 30 * t <= angle < 30 * (t + 1) and mode == TF.InterpolationMode.NEAREST
            else:
                assert angle == 30 * t and mode == TF.InterpolationMode.BILINEAR
    assert (angles[0] != angles[1]) == (rotation == "gem")


def test_rotation_is_refused_where_nothing_rotates():
    config.register()
    with pytest.raises(UserError, match="dataset.rotation=even .* read only by dataset.kind=rotated"):
        config.validate(config.compose(["dataset=split_digits", "dataset.rotation=even"]))


@pytest.mark.parametrize("size, convs, hidden", [(32, 3, 320), (64, 4, 640)])
def test_pc_cnn_is_la_mamls_bn_free_net(size, convs, hidden):
    net = backbones.build({"name": "pc_cnn"}, (3, size, size))
    conv = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    linear = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert not any(isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)) for m in net.modules())
    assert len(conv) == convs and all(c.out_channels == 160 and c.stride == (2, 2) for c in conv)
    assert [m.out_features for m in linear] == [hidden, hidden] and linear[0].in_features == 160 * 16
    assert all(torch.equal(m.bias, torch.zeros_like(m.bias)) for m in conv + linear)  # kaiming weights, zero bias
    assert net(torch.zeros(2, 3, size, size)).shape == (2, hidden) and net.feature_dim == hidden


def test_brightness_jitter_scales_each_image_by_its_own_factor_as_colorjitter():
    from cl_bench.data.batches import random_brightness
    x = torch.full((4000, 1, 2, 2), 100, dtype=torch.uint8)
    x[:, :, 0, 0] = 250  # a pixel that clips when brightened
    out = random_brightness(x, 0.25, torch.Generator().manual_seed(0))
    factor = out[:, 0, 1, 1] / 100
    assert factor.min() >= 0.75 and factor.max() <= 1.25 and abs(factor.mean() - 1) < 0.01
    assert torch.allclose(out[:, 0, 0, 1], out[:, 0, 1, 1])  # one factor per image
    torch.testing.assert_close(out[:, 0, 0, 0], (250 * factor).clamp(max=255))
    config.register()
    with pytest.raises(UserError, match="dataset.brightness_jitter=0.2 .*dataset.augment=true"):
        config.validate(config.compose(["dataset=split_digits", "dataset.brightness_jitter=0.2"]))
