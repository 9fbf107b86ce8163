"""PackNet, Piggyback and CPG: the straight-through binariser, the cubic schedule, bit-exact old tasks (growth
included), mask state in checkpoints, and zero forgetting and resume through the real CLI."""
import json
import shutil

import pytest
import torch
from conftest import cl_bench, contract_problems, train
from safetensors.torch import load_file
from test_method_contract import trial, trial_args

from cl_bench import backbones, checkpoint, config, methods, recorders
from cl_bench.backbones.base import Capability
from cl_bench.data import scenarios
from cl_bench.data.batches import View
from cl_bench.errors import UserError
from cl_bench.methods.cpg import cubic_sparsity
from cl_bench.nn import masked
from cl_bench.train import run

TINY = {
    "packnet": ["method=packnet", "backbone=mlp", "backbone.hidden_sizes=[32,32]", "method.retrain_epochs=1"],
    "piggyback": ["method=piggyback", "backbone=convnet", "backbone.channels=[8,16]", "method.mask_lr=0.01"],
    "cpg": ["method=cpg", "backbone=convnet", "backbone.channels=[8,16]", "method.prune_targets=[0.5,0.9]",
            "method.prune_epochs=1", "method.prune_ramp_epochs=1", "method.prune_frequency=2",
            "method.retrain_epochs=1", "method.mask_lr=0.01"],
}
COMMON = ["method.epochs=2", "method.lr=0.05", "method.lr_milestones=[]"]


pytestmark = pytest.mark.usefixtures("one_thread")


def compose_cfg(*overrides):
    config.register()
    return config.validate(config.compose(list(overrides)))


def build(*overrides):
    cfg = compose_cfg(*overrides)
    torch.manual_seed(0)
    device = torch.device("cpu")
    scenario = scenarios.build(cfg.dataset, cfg.data, cfg.scenario, cfg.seed, device)
    ctx = methods.Context(device, None, torch.Generator().manual_seed(0), recorders.Recorder())
    info = scenario.info
    return cfg, scenario.tasks, lambda: methods.build(cfg.method, backbones.build(cfg.backbone, info.input_shape),
                                                      info, ctx)


@torch.no_grad()
def logits(method, tasks):
    method.eval()
    return [method.predict(method.info.view.eval(t.val.x), t.id) for t in tasks]


def test_binarize_is_straight_through():
    score = torch.tensor([0.0, 0.004, 0.005, 0.006, 0.02], requires_grad=True)
    bits = masked.binarize(score, 5e-3)
    assert bits.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
    (bits * torch.arange(5.0)).sum().backward()
    assert score.grad.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_masked_weight_skips_only_trivial_masks():
    """The forward weight equals the reference's weight × mask in every state, and the product is skipped just
    where the mask is all ones (PackNet's newest task, every weight its own or earlier tasks') or where a picking
    task has no earlier weights to pick from."""
    torch.manual_seed(0)
    layer = masked.MaskedLinear(torch.nn.Linear(6, 4), num_tasks=3, picking=(1e-2, 5e-3))
    w = layer.weight.detach()

    def reference(t):  # PackNet's rule, and CPG's while learning t with every score above the threshold
        own = layer.owner
        return w * ((own > 0) & (own <= t + 1))

    def check(t, trivial):
        layer.task = t
        masks = layer.constant_masks(6)
        assert (all(m is None for m in masks) if trivial else any(m is not None for m in masks)), (t, masks)
        assert torch.equal(layer.masked_weight(6), reference(t))

    layer.claim(0)
    check(0, trivial=True)  # task 0 owns everything: w itself
    assert layer.trainable_mask(0) is None
    layer.release(0, 0.5)
    check(0, trivial=False)  # released weights leave the forward pass
    assert torch.equal(layer.trainable_mask(0), (layer.owner == 1).float())
    layer.claim(1)
    check(0, trivial=False)  # task 0 does not see task 1's weights
    check(1, trivial=True)  # the newest task computes with every weight
    layer.start_picking(1)  # CPG: a score over task 0's weights, all picked at the start
    layer.learning = 1
    own, earlier = layer.constant_masks(6)
    assert own is not None and earlier is not None and torch.equal(layer.masked_weight(6), reference(1))


def test_cubic_sparsity_schedule():
    assert cubic_sparsity(0, 0, 100, 0.2, 0.5) == pytest.approx(0.2)
    assert cubic_sparsity(100, 0, 100, 0.2, 0.5) == pytest.approx(0.5)
    assert cubic_sparsity(150, 0, 100, 0.2, 0.5) == pytest.approx(0.5)
    assert cubic_sparsity(50, 0, 100, 0.2, 0.5) == pytest.approx(0.5 - 0.3 * 0.5 ** 3)
    values = [cubic_sparsity(s, 10, 60, 0.0, 0.9) for s in range(0, 70)]
    assert values == sorted(values) and values[10] == 0.0
    steps = [b - a for a, b in zip(values[10:60], values[11:61])]
    assert steps == sorted(steps, reverse=True)  # fast at first, slow near the target


@pytest.mark.parametrize("name", ["packnet", "piggyback", "cpg"])
def test_old_tasks_bit_exact(name):
    cfg, tasks, make = build(*TINY[name], *COMMON, *(["method.goal_source=none"] if name == "cpg" else []))
    method = make()
    seen = []
    for task in tasks[:4]:
        method.learn(task)
        now = logits(method, tasks[: task.id + 1])
        for j, (before, after) in enumerate(zip(seen, now)):
            assert torch.equal(before, after), f"{name}: task {j} changed after learning task {task.id}"
        seen.append(now[-1])
    cap = method.capacity()
    assert cap["free_fraction"] < 1 and len(cap["params_owned_per_task"]) == 4
    assert sum(cap["params_owned_per_task"]) == pytest.approx(cap["params_shared"] * (1 - cap["free_fraction"]))
    if name == "packnet":
        assert cap["sparsity_per_task"] == pytest.approx([0.6] * 4, abs=0.01)
    elif name == "piggyback":
        assert cap["params_owned_per_task"][1:] == [0, 0, 0] and len(cap["picking_density_per_task"]) == 3
    else:
        assert all(0 <= s < 1 for s in cap["sparsity_per_task"]) and len(cap["picking_density_per_task"]) == 3


def test_cpg_grows_keeps_old_tasks_and_checkpoints(tmp_path):
    cfg, tasks, make = build(*TINY["cpg"], *COMMON, "method.goal_source=fixed", "method.goal=0.0")
    method = make()
    method.learn(tasks[0])
    before = logits(method, tasks[:1])
    widths = [layer.weight.shape for layer in method.layers]
    method.cfg.goal, method.cfg.max_multiplier = 1.01, 2.0  # unreachable: task 1 grows to the limit
    method.learn(tasks[1])
    grown = [layer.weight.shape for layer in method.layers]
    # every shared width to int(w·√2), as ivclab/CPG sizes its layers: the last one (the features) too, so the
    # heads of task 1 on read 22 features while task 0's still reads its 16
    assert widths[0][0] == 8 and grown[0][0] == 11 and grown[1][1] == 11 and grown[1][0] == 22
    assert [h.in_features for h in method.heads.heads[:3]] == [16, 22, 22]
    cap = method.capacity()
    assert cap["param_multiplier"] == 2.0 and cap["growth"] > 1.0
    assert cap["param_multiplier_per_task"] == [1.0, 2.0]  # how far each task grew, as metrics.json reports it
    assert torch.equal(logits(method, tasks[:1])[0], before[0])
    method.cfg.goal = 0.0
    method.learn(tasks[2])
    after = logits(method, tasks[:3])
    assert torch.equal(after[0], before[0])

    checkpoint.save(tmp_path, 2, method, {"acc": []}, {}, 0.0)
    state, masks, _, problems = checkpoint.load(tmp_path)
    assert not problems
    stored = load_file(tmp_path / "checkpoints" / "task_002" / "masks.safetensors")
    shared = method.capacity()["params_shared"]
    assert sum(v.numel() * v.element_size() for v in stored.values()) <= shared * (1 + 3 / 8) + 8 * len(stored)
    fresh = make()
    fresh.load_state_dict({**state, **masks})
    assert [layer.weight.shape for layer in fresh.layers] == grown
    for a, b in zip(logits(fresh, tasks[:3]), after):
        assert torch.equal(a, b)
    assert fresh.capacity() == method.capacity()


def grows_keeping_task_0(method, tasks, grow) -> None:
    """Task 0 claims every weight, grow() widens the network, and task 0's outputs stay what they were while task
    1's come at their shape."""
    for layer in method.layers:
        layer.claim(0)
    x = method.info.view.eval(tasks[0].train.x[:16])
    method.eval()
    with torch.no_grad():
        before = method.predict(x, 0)
        grow()
        assert torch.equal(method.predict(x, 0), before)
        assert method.predict(x, 1).shape == before.shape


def test_residual_blocks_widen_inside_only():
    cfg, tasks, make = build("method=cpg", "backbone=resnet18_reduced", "backbone.nf=2")
    method = make()
    grows_keeping_task_0(method, tasks, lambda: masked.widen(method.backbone, 2.0, from_task=1))
    block = method.backbone.layers[2]
    assert block.conv1.weight.shape[0] == block.conv2.weight.shape[1] == 5  # int(4 channels × √2), as the official
    assert block.conv2.weight.shape[0] == 4 and block.shortcut[0].weight.shape[:2] == (4, 2)


# Widths at which growth's int(width x sqrt(2)) adds units to every layer
WIDENING = {"mlp": ["backbone.hidden_sizes=[8,8]"], "convnet": ["backbone.channels=[8,8]"],
            "resnet18": ["backbone.nf=4"], "resnet18_reduced": ["backbone.nf=4"],
            "vgg16_bn": ["backbone.width=0.125", "backbone.hidden=16"]}


@pytest.mark.parametrize("name", sorted(WIDENING))
def test_every_backbone_that_declares_widen_grows_and_keeps_old_tasks(cifar10, name):
    """On 32x32 CIFAR-10 files (every backbone takes them), at widths that grow."""
    assert Capability.widen in backbones.BACKBONES[name][0].capabilities
    cfg, tasks, make = build("method=cpg", f"backbone={name}", *WIDENING[name], "dataset=split_cifar10",
                             f"data.root={cifar10}")
    method = make()
    widths = [layer.weight.shape[0] for layer in method.layers]
    # the backbone's layers and, where its features widen, the heads' input
    grows_keeping_task_0(method, tasks, lambda: method.widen(2.0, 1))
    assert [layer.weight.shape[0] for layer in method.layers] != widths, "growth added units"


def test_growth_is_refused_on_a_backbone_it_cannot_widen_and_allowed_without_growth():
    """pc_cnn flattens its last conv map into a linear layer (on 32x32 input a 4x4 map): growth would widen that
    layer's input by the map's area. CPG with growth refuses it in one line; with max_multiplier 1 it builds."""
    assert Capability.widen not in backbones.BACKBONES["pc_cnn"][0].capabilities
    _, _, make = build("method=cpg", "backbone=pc_cnn", "backbone.channels=4")
    with pytest.raises(UserError, match=r"method=cpg needs a backbone with layers growth can widen .*capability "
                                        r"widen.*use backbone="):
        make()
    _, _, make = build("method=cpg", "backbone=pc_cnn", "backbone.channels=4", "method.max_multiplier=1")
    assert make().cfg.max_multiplier == 1


# Whose uninterrupted run below is its trial (test_method_contract.py: two tasks, every checkpoint kept), issue 74
ON_TRIAL = ("packnet", "piggyback")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["packnet", "piggyback", "cpg", "cpg-finetune-goals"])
def test_cli_zero_forgetting_and_resume(tmp_path_factory, worker_id, tmp_path, name):
    """Through the real CLI (in-process for the trials): zero forgetting, the run contract, the capacity report;
    then a run cut after its middle task and resumed ends exactly as the uninterrupted one (resumed with the CLI for
    cpg, whose checkpoint holds grown layers, and for its fine-tuned goals, whose chains a resumed run continues;
    in-process through train.run for the others, to spare two slow process starts)."""
    full = tmp_path / "full"
    if name in ON_TRIAL:
        overrides, run_of_trial = trial_args(name, "task"), trial(tmp_path_factory, worker_id, name, "task")
        shutil.copytree(run_of_trial["run_dir"], full)
        m = run_of_trial["metrics"]
    else:
        overrides = [*TINY[name.split("-")[0]], *COMMON]
        if name == "cpg-finetune-goals":
            overrides += ["method.goal_source=finetune"]
        if name == "cpg":  # an unreachable goal: the first task grows, and the resumed run must rebuild that
            overrides += ["method.goal_source=fixed", "method.goal=1.01"]
        m = train(full, *overrides)
    assert m["forgetting"] == 0.0 and m["complete"] and not contract_problems(full)
    cap = m["capacity"]
    for key in ("params_total", "params_owned_per_task", "free_fraction", "growth", "mask_bytes",
                "sparsity_per_task"):
        assert key in cap
    if name == "cpg":
        assert cap["growth"] > 1.0 and cap["param_multiplier"] == 1.5

    cut, middle = tmp_path / "cut", (m["num_tasks"] - 1) // 2
    shutil.copytree(full, cut)
    for t in range(middle + 1, m["num_tasks"]):
        shutil.rmtree(cut / "checkpoints" / f"task_{t:03d}")
    (cut / "checkpoints" / "last").write_text(f"task_{middle:03d}")
    (cut / "metrics.json").unlink()
    if name.startswith("cpg"):
        proc = cl_bench("train", f"resume={cut}")
        assert proc.returncode == 0, proc.stderr[-2000:]
    else:
        run(compose_cfg(*overrides, f"resume={cut}"), cut)
    resumed = json.loads((cut / "metrics.json").read_text())
    drop = ("time_s", "peak_mem_mb")
    assert {k: v for k, v in resumed.items() if k not in drop} == {k: v for k, v in m.items() if k not in drop}


@pytest.mark.parametrize("preset", ["cpg_split_digits", "packnet_split_digits", "piggyback_split_digits"])
def test_presets_compose(preset):
    cfg = compose_cfg(f"experiment={preset}")
    assert cfg.method.name == preset.split("_")[0] and cfg.scenario == "task"


def test_vgg_grows_across_the_conv_to_linear_boundary():
    """CPG's cifar100_20 setting's network (classifier body narrowed to keep the test light): growth widens every
    conv and linear layer, the last one and the later tasks' heads too, and a learned task computes as before."""
    cfg = compose_cfg("method=cpg", "dataset=cifar100_20", "backbone.hidden=64")
    device = torch.device("cpu")
    info = scenarios.Info("cifar100_20", "task", (3, 32, 32), [list(range(5))] * 20, [5 * t for t in range(20)],
                          View((0.5,) * 3, (0.25,) * 3, True, device))
    ctx = methods.Context(device, None, torch.Generator().manual_seed(0), recorders.Recorder())
    method = methods.build(cfg.method, backbones.build(cfg.backbone, info.input_shape), info, ctx)
    for layer in method.layers:
        layer.claim(0)
        layer.release(0, 0.5)
    x = torch.randn(4, 3, 32, 32)
    method.eval()
    with torch.no_grad():
        before = method.predict(x, 0)
        method.widen(1.5, 1)
        assert torch.equal(method.predict(x, 0), before)
        assert method.predict(x, 1).shape == (4, 5)
    shapes = [tuple(layer.weight.shape[:2]) for layer in method.layers]
    assert shapes[0] == (78, 3) and shapes[1] == (78, 78) and shapes[12] == (627, 627)  # int(64·√1.5), int(512·√1.5)
    assert shapes[13] == (78, 627) and shapes[14] == (78, 78)  # int(64·√1.5): the last layer widens too
    assert method.heads.heads[0].in_features == 64 and method.heads.heads[1].in_features == 78


def official_vgg_weights(multiplier: float) -> int:
    """The conv and linear weights of ivclab/CPG's custom_vgg_cifar100 at a width multiplier, counted as its
    make_layers_cifar100 sizes them: int(v × √multiplier) channels, 3 input channels, 512-4096-4096 body."""
    width = lambda v: int(v * multiplier ** 0.5)  # noqa: E731
    count, c_in = 0, 3
    for v in (64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512):
        count += width(v) * c_in * 9
        c_in = width(v)
    return count + width(512) * width(4096) + width(4096) * width(4096)


def test_growth_to_1_5_gives_the_official_vgg16_bn_weights():
    """mul_1.5 of the official script: 1.499× the weights of VGG16-BN, every shared layer widened alike."""
    cfg = compose_cfg("method=cpg", "dataset=cifar100_20")
    info = scenarios.Info("cifar100_20", "task", (3, 32, 32), [list(range(5))] * 2, [0, 5],
                          View((0.5,) * 3, (0.25,) * 3, True, torch.device("cpu")))
    ctx = methods.Context(torch.device("cpu"), None, torch.Generator().manual_seed(0), recorders.Recorder())
    method = methods.build(cfg.method, backbones.build(cfg.backbone, info.input_shape), info, ctx)
    assert method.initial_shared == official_vgg_weights(1.0)
    method.widen(1.5, 1)
    shared = sum(layer.weight.numel() for layer in method.layers)
    assert shared == official_vgg_weights(1.5) and round(shared / method.initial_shared, 3) == 1.499
