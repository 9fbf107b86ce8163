"""HAT (Serrà et al. 2018): bit-exact old tasks, the annealing of s, the embeddings' gradient compensation, the
weights' gradient masks and the regulariser against hand computations on known values, the official plateau
schedule on the validation loss, and the task scenario (and the class one refused) through the real CLI."""
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import cl_bench
from test_method_contract import trial

from cl_bench import backbones, config, methods, recorders
from cl_bench.data import scenarios
from cl_bench.errors import UserError
from cl_bench.methods import hat as hat_method
from cl_bench.methods.hat import anneal_s, attention_regulariser, compensation
from cl_bench.nn import hat

pytestmark = pytest.mark.usefixtures("one_thread")

MLP = ["backbone=mlp", "backbone.hidden_sizes=[32,32]"]
CONV = ["backbone=convnet", "backbone.channels=[8,16]"]
HAT_MLP = ["backbone=hat_mlp", "backbone.hidden_sizes=[32,32]"]  # mlp_hat's dropout, narrower


class EpochLog(recorders.Recorder):
    def __init__(self):
        self.epochs = []

    def epoch_end(self, task_id, epoch, loss):
        self.epochs.append((task_id, epoch))


def build(*overrides, recorder=None):
    config.register()
    cfg = config.validate(config.compose(["method=hat", "method.epochs=1", *overrides]))
    torch.manual_seed(0)
    device = torch.device("cpu")
    scenario = scenarios.build(cfg.dataset, cfg.data, cfg.scenario, cfg.seed, device)
    ctx = methods.Context(device, None, torch.Generator().manual_seed(0), recorder or recorders.Recorder())
    info = scenario.info
    return methods.build(cfg.method, backbones.build(cfg.backbone, info.input_shape), info, ctx), scenario.tasks


@torch.no_grad()
def logits(method, tasks):
    method.eval()
    return [method.predict(method.info.view.eval(t.val.x), t.id) for t in tasks]


@pytest.mark.parametrize("overrides", [MLP, HAT_MLP, CONV, [*CONV, "method.batch_norm=per_task"]],
                         ids=["mlp", "mlp-dropout", "convnet", "convnet-per-task-bn"])
def test_old_tasks_bit_exact(overrides):
    """Later tasks leave earlier tasks' predictions bit for bit as they were. HAT guarantees this where the old
    attentions are binary in floating point (σ(s_max·e) exactly 0 or 1, or so small that 1 - a rounds to 1 and
    the unit's contribution is lost in rounding); the compensated embedding steps get there within an epoch."""
    method, tasks = build(*overrides, "method.epochs=1")
    seen = []
    for task in tasks[:4]:
        method.learn(task)
        now = logits(method, tasks[: task.id + 1])
        for j, (before, after) in enumerate(zip(seen, now)):
            assert torch.equal(before, after), f"task {j} changed after learning task {task.id}"
        seen.append(now[-1])
        for layer in method.layers:
            c = layer.cumulative
            assert ((c == 0) | (c == 1) | (c < 1e-20)).all(), "an old attention is not binary: not HAT's guarantee"
    cap = method.capacity()
    assert len(cap["units_used_per_task"]) == 4 and 0 < cap["weights_used_fraction"] < 1
    assert set(cap["units_used_fraction"]) == set(method.layer_names)


def test_conversion_links_layers_and_drops_batch_norm():
    method, _ = build(*CONV)
    convs = [layer.layer for layer in method.layers]
    assert [c.bias is not None for c in convs] == [True, True]  # the official convs have biases, no batch norm
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in method.backbone.modules())
    assert method.layers[0].previous is None and method.layers[1].previous is method.layers[0]
    per_task, _ = build(*CONV, "method.batch_norm=per_task")
    assert all(len(layer.bns) == 5 and layer.layer.bias is None for layer in per_task.layers)
    vgg = backbones.build({"name": "vgg16_bn", "hidden": 8}, (3, 32, 32))
    layers = hat.convert(vgg, 2, 400.0, False)
    assert len(layers) == 15 and layers[13].layer.in_features == 512 and layers[13].previous is layers[12]


def test_unsupported_backbone_is_one_line():
    refusal = r"method=hat needs a backbone with its layers in one chain.*capability chain\); ResNet18 has none: "
    with pytest.raises(UserError, match=refusal + "use backbone=mlp or convnet or vgg16_bn"):
        build("backbone=resnet18_reduced")


def test_annealing_of_s_over_an_epoch(monkeypatch):
    """s per batch as the official code computes it (1/s_max + (s_max - 1/s_max)·i/N, i the batch's first
    sample) and as the paper's Eq. 3 (over b = 1..B, s_max at the last batch)."""
    seen = []
    set_scale = hat.set_scale
    monkeypatch.setattr(hat, "set_scale", lambda layers, s: (seen.append(s), set_scale(layers, s)))
    for formula in ("official", "paper"):
        seen.clear()
        method, tasks = build(*MLP, "method.batch_size=50", "method.epochs=2", f"method.anneal={formula}",
                              "method.lr_schedule=milestones")
        method.learn(tasks[0])
        n, smax = len(tasks[0].train), 400.0
        batches = math.ceil(n / 50)
        if formula == "official":
            want = [(smax - 1 / smax) * (b * 50) / n + 1 / smax for b in range(batches)]
            assert want[-1] < smax
        else:
            want = [1 / smax + (smax - 1 / smax) * b / (batches - 1) for b in range(batches)]
            assert want[-1] == pytest.approx(smax)
        assert want[0] == pytest.approx(1 / smax)
        assert seen == pytest.approx(want * 2, rel=1e-12)  # restarting every epoch
        assert all(layer.s.item() == pytest.approx(want[-1]) for layer in method.layers)
    assert anneal_s(3, 8, 64, 500, 400.0, "official") == pytest.approx(1 / 400 + (400 - 1 / 400) * 192 / 500)
    assert anneal_s(3, 8, 64, 500, 400.0, "paper") == pytest.approx(1 / 400 + (400 - 1 / 400) * 3 / 7)


def test_compensation_by_hand():
    e = torch.tensor([-6.0, -0.5, 0.0, 0.3, 2.0])
    s, smax = 25.0, 400.0
    want = [smax / s * (math.cosh(max(-50.0, min(50.0, s * v))) + 1) / (math.cosh(v) + 1) for v in e.tolist()]
    assert compensation(e, s, smax, 50.0).tolist() == pytest.approx(want, rel=1e-5)
    # s·e = -150 is clamped to -50 inside cosh
    assert compensation(e[:1], s, smax, 50.0).item() == pytest.approx(16 * (math.cosh(50) + 1) / (math.cosh(6) + 1),
                                                                      rel=1e-5)


def one_step(method, task, setup=None):
    """Learn `task` in one SGD step on one batch holding all its samples; returns the parameters before and the
    gradients the plain loss gives (at s = 1/s_max), computed here by autograd."""
    method.heads.seen = method.info.seen_outputs(task.id)
    if setup is not None:
        setup()
    before = {n: p.detach().clone() for n, p in method.named_parameters()}
    method.train()
    hat.set_scale(method.layers, 1 / method.cfg.s_max)
    x = method.info.view.train(task.train.x)
    loss = F.cross_entropy(method(x, task.id), task.train.y - task.offset)
    loss = loss + method.cfg.c * method.regulariser(task.id, 1 / method.cfg.s_max)
    grads = dict(zip([n for n, _ in method.named_parameters()],
                     torch.autograd.grad(loss, list(method.parameters()), allow_unused=True)))
    method.zero_grad(set_to_none=True)
    method.learn(task)
    return before, grads


STEP = [*MLP, "method.batch_size=100000", "method.lr_schedule=milestones", "method.clipgrad=1e12", "method.lr=0.01"]


def test_embedding_gradient_compensation_in_a_step():
    method, tasks = build(*STEP)
    before, grads = one_step(method, tasks[0])
    s, lr = 1 / 400, 0.01
    for name in ("backbone.body.1.embedding", "backbone.body.3.embedding"):
        e = before[name]
        want = (e - lr * grads[name] * compensation(e, s, 400.0, 50.0)).clamp(-6, 6)
        got = dict(method.named_parameters())[name].detach()
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
        assert torch.equal(got[1:], e[1:])  # other tasks' rows untouched
        assert not torch.equal(got[0], e[0])


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_weight_gradient_masks_in_a_step(wd):
    """Task 1 with known cumulative masks a_{<1}: each weight's step is the plain gradient (plus weight decay,
    added before the mask) times 1 - min(a_out, a_in), each bias's times 1 - a_out; the first layer reads the
    input (no input mask)."""
    method, tasks = build(*STEP, f"method.weight_decay={wd}")
    first, second = method.layers
    a1 = torch.tensor([0.0, 1.0, 0.25, 0.75] * 8)
    a2 = torch.tensor([1.0, 0.0, 0.5, 0.1] * 8)

    def setup():
        first.cumulative.copy_(a1)
        second.cumulative.copy_(a2)

    before, grads = one_step(method, tasks[1], setup)
    lr = 0.01
    live = dict(method.named_parameters())
    mask2 = 1 - torch.minimum(a2[:, None], a1[None, :])
    cases = [("backbone.body.1.layer.weight", (1 - a1)[:, None]), ("backbone.body.1.layer.bias", 1 - a1),
             ("backbone.body.3.layer.weight", mask2), ("backbone.body.3.layer.bias", 1 - a2)]
    for name, mask in cases:
        want = before[name] - lr * (grads[name] + wd * before[name]) * mask
        assert torch.allclose(live[name].detach(), want, rtol=1e-4, atol=1e-7), name
    w = live["backbone.body.3.layer.weight"].detach()
    frozen = mask2 == 0
    assert frozen.any() and torch.equal(w[frozen], before["backbone.body.3.layer.weight"][frozen])
    assert torch.equal(live["heads.heads.0.weight"], before["heads.heads.0.weight"])
    # a_{≤1} = max(a_{<1}, σ(s_max·e_1))
    want = torch.maximum(a1, torch.sigmoid(400 * live["backbone.body.1.embedding"][1].detach()))
    assert torch.equal(first.cumulative, want)


def test_regulariser_by_hand():
    masks = [torch.tensor([0.2, 0.9, 0.5]), torch.tensor([1.0, 0.0])]
    assert attention_regulariser(masks, [torch.zeros(3), torch.zeros(2)]).item() == pytest.approx(2.6 / 5)
    cumulative = [torch.tensor([1.0, 0.5, 0.0]), torch.tensor([0.25, 1.0])]
    # Σ a(1 - a_<t) = 0.2·0 + 0.9·0.5 + 0.5·1 + 1·0.75 + 0·0 = 1.7 over Σ(1 - a_<t) = 0 + 0.5 + 1 + 0.75 + 0 = 2.25
    assert attention_regulariser(masks, cumulative).item() == pytest.approx(1.7 / 2.25)
    assert attention_regulariser(masks, [torch.ones(3), torch.ones(2)]).item() == 0.0
    method, _ = build(*MLP)
    method.layers[0].cumulative.fill_(0.5)
    a = [torch.sigmoid(3.0 * layer.embedding[2]) for layer in method.layers]
    want = ((a[0] * 0.5).sum() + a[1].sum()) / (0.5 * 32 + 32)
    assert method.regulariser(2, 3.0).item() == pytest.approx(want.item(), rel=1e-6)


def test_plateau_schedule_on_validation(monkeypatch):
    """The official schedule: lr ÷3 and a fresh optimiser after `patience` epochs without a better validation
    loss, the task ended once the lr falls below lr_min, the best-validation model restored."""
    log = EpochLog()
    method, tasks = build(*MLP, "method.epochs=20", "method.lr_patience=2", "method.lr=0.05", "method.lr_min=0.004",
                          recorder=log)
    losses = iter([3.0, 1.0, 2.0, 2.0, 0.5, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0])
    snapshots, lrs, opts = [], [], []
    make = method.loop.make_optimizer
    monkeypatch.setattr(method.loop, "make_optimizer", lambda *a, **k: opts.append(make(*a, **k)) or opts[-1])

    def fake_val(task):
        assert task is tasks[0]
        snapshots.append(method.heads.heads[0].weight.detach().clone())
        lrs.append(opts[0].param_groups[0]["lr"])
        return next(losses)

    monkeypatch.setattr(method, "validation_loss", fake_val)
    method.learn(tasks[0])
    # epochs 0-4: better at 0, 1, 4; ÷3 after epochs 3 and 6 (0.05 → 0.0167 → 0.0056), ÷3 after 8 ends it (0.0019)
    assert len(log.epochs) == 9
    assert lrs == pytest.approx([0.05] * 4 + [0.05 / 3] * 3 + [0.05 / 9] * 2)
    assert torch.equal(method.heads.heads[0].weight, snapshots[4])


def test_validation_loss_uses_validation_split():
    method, tasks = build(*MLP)
    method.learn(tasks[0])
    method.eval()
    task = tasks[0]
    with torch.no_grad():
        ce = F.cross_entropy(method(method.info.view.eval(task.val.x), 0), task.val.y - task.offset)
        want = ce + 0.75 * method.regulariser(0, 400.0)
    assert method.validation_loss(task) == pytest.approx(want.item(), rel=1e-5)


def test_config_checks():
    with pytest.raises(UserError, match="method.lr_milestones"):
        build(*MLP, "method.lr_milestones=[3]")
    with pytest.raises(UserError, match="method.s_max"):
        build(*MLP, "method.s_max=0.5")
    assert hat_method.HAT.traits.scenarios == frozenset({"task"})


@pytest.mark.slow  # its trial's run (test_method_contract.py), and a process
def test_its_trial_forgets_nothing_and_reports_its_units_and_the_cli_refuses_the_class_scenario(tmp_path_factory,
                                                                                                worker_id, tmp_path):
    m = trial(tmp_path_factory, worker_id, "hat", "task")["metrics"]
    assert m["forgetting"] == 0.0 and m["bwt"] == 0.0
    assert set(m["capacity"]) >= {"units_used_fraction", "units_used_per_task", "weights_used_fraction"}
    proc = cl_bench("train", f"hydra.run.dir={tmp_path / 'class'}", "logger=none", "method=hat", "scenario=class")
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "method=hat does not support scenario=class" in lines[0], proc.stderr
