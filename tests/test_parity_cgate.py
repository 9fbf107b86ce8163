"""The cgate parity runner: the split it writes is cl-bench's, in files torchvision's CIFAR10 (gated_task) and MNIST
(gated_learn) read, and the matrix cgate prints parses into cl-bench's layout. No reference checkout or real data
needed."""
import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from parity import cgate, common  # noqa: E402
from test_parity_cpg import smoke_arguments_checked  # noqa: E402

PER_CLASS = {"train": 13, "test": 7}  # odd sizes, so that the caps and the held-out share leave uneven splits


def write_cifar10(root: Path) -> None:
    """Small canonical cifar-10-batches-py files (bytes keys, as the published ones), every class present."""
    rng = np.random.default_rng(0)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    names = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
    for split, files in names.items():
        labels = rng.permutation(np.repeat(np.arange(10), PER_CLASS[split]))
        for name, part in zip(files, np.array_split(labels, len(files))):
            images = rng.integers(0, 256, (len(part), 3072), dtype=np.uint8)
            (folder / name).write_bytes(pickle.dumps({b"data": images, b"labels": part.tolist()}, protocol=3))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar")
    write_cifar10(root)
    row = cgate.ROWS["gated_task"]
    return common.scenario([*common.clbench_overrides(row, 3, str(root)), "data.cache=false",
                            "dataset.samples_per_task=20", "dataset.test_samples_per_task=11"])


@pytest.fixture
def written(scenario, tmp_path):
    cgate.write_tasks(scenario, cgate.ROWS["gated_task"], tmp_path)
    return tmp_path


def test_written_split_reads_back_as_cl_benchs(scenario, written):
    back = cgate.read_tasks(written)
    assert len(back) == len(scenario.tasks) == 5
    for task, test, got in zip(scenario.tasks, scenario.test, back):
        for name, split in (("train", task.train), ("val", task.val), ("test", test)):
            x, y = got[name]
            assert len(y) > 0
            np.testing.assert_array_equal(x, split.x.cpu().numpy(), err_msg=f"task {task.id} {name}")
            np.testing.assert_array_equal(y, split.y.cpu().numpy(), err_msg=f"task {task.id} {name}")


def test_torchvision_reads_the_files_as_cgate_does(scenario, written, monkeypatch):
    """cgate opens them with torchvision's CIFAR10; the PATCHES only skip its checksums."""
    cifar = pytest.importorskip("torchvision.datasets.cifar")
    monkeypatch.setattr(cifar, "check_integrity", lambda *args, **kwargs: True)
    train = cifar.CIFAR10(written, train=True)
    test = cifar.CIFAR10(written, train=False)
    sizes = {name: sum(len(getattr(t, name)) for t in scenario.tasks) for name in ("train", "val")}
    assert len(train.targets) == sizes["train"] + sizes["val"]
    assert len(test.targets) == sum(len(s) for s in scenario.test)
    held = np.load(written / cgate.HELDOUT)
    np.testing.assert_array_equal(held, np.arange(sizes["train"], sizes["train"] + sizes["val"]))
    first = scenario.tasks[0].train.x[0].cpu().numpy().transpose(1, 2, 0)  # torchvision keeps images H x W x C
    np.testing.assert_array_equal(train.data[0], first)


def write_mnist(root: Path) -> None:
    """Small MNIST idx files, uncompressed as torchvision leaves them, every digit present."""
    rng = np.random.default_rng(1)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split in ("train", "test"):
        labels = rng.permutation(np.repeat(np.arange(10), PER_CLASS[split])).astype(np.uint8)
        common.write_idx(raw / common.IDX[f"{split}_x"], rng.integers(0, 256, (len(labels), 28, 28), dtype=np.uint8))
        common.write_idx(raw / common.IDX[f"{split}_y"], labels)


def test_the_learning_rows_mnist_split_is_written_as_torchvisions_mnist_reads_it(tmp_path, monkeypatch):
    """gated_learn's Split MNIST: cgate's prepare_dataset opens the files with torchvision's MNIST (no checksums on
    the raw files) and holds out heldout.npy's rows (its row patch); both give back cl-bench's split."""
    root = tmp_path / "mnist"
    write_mnist(root)
    row = cgate.ROWS["gated_learn"]
    scenario = common.scenario([*common.clbench_overrides(row, 3, str(root)), "data.cache=false",
                                "dataset.samples_per_task=20", "dataset.val_samples_per_task=4",
                                "dataset.test_samples_per_task=11"])
    folder = tmp_path / "written"
    cgate.write_tasks(scenario, row, folder)
    assert not (folder / cgate.CIFAR).exists()
    for task, test, got in zip(scenario.tasks, scenario.test, cgate.read_tasks(folder), strict=True):
        for name, split in (("train", task.train), ("val", task.val), ("test", test)):
            np.testing.assert_array_equal(got[name][0], split.x.cpu().numpy(), err_msg=f"task {task.id} {name}")
            np.testing.assert_array_equal(got[name][1], split.y.cpu().numpy(), err_msg=f"task {task.id} {name}")
    mnist = pytest.importorskip("torchvision.datasets.mnist")
    train, test = mnist.MNIST(folder, train=True), mnist.MNIST(folder, train=False)
    sizes = [sum(len(getattr(t, name)) for t in scenario.tasks) for name in ("train", "val")]
    assert len(train.targets) == sum(sizes) and len(test.targets) == sum(len(s) for s in scenario.test)
    np.testing.assert_array_equal(np.load(folder / cgate.HELDOUT), np.arange(sizes[0], sum(sizes)))
    np.testing.assert_array_equal(train.data[0].numpy(), scenario.tasks[0].train.x[0, 0].cpu().numpy())
    assert cgate.task_pairs(folder) == "TASK_PAIRS=[(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]"


def test_task_pairs_name_each_tasks_classes(written):
    assert cgate.task_pairs(written) == "TASK_PAIRS=[(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]"


# What cgate's src/train.py prints at its end (tqdm's bars before it), as captured from a run.
CAPTURED = """\
  0%|          | 0/4 [00:00<?, ?it/s] 25%|##5       | 1/4 [00:05<00:15,  5.04s/it]100%|##########| 4/4
Files already downloaded and verified

---- Task incremental accuracies ----
tensor([[0.9062, 0.9043, 0.9043],
        [0.0000, 0.7500, 0.7480],
        [0.0000, 0.0000, 8.1250e-01]])
"""


def test_printed_matrix_parses_into_cl_benchs_layout():
    outcome = cgate.parse_accuracies(CAPTURED)
    assert outcome.matrix == [[0.9062], [0.9043, 0.75], [0.9043, 0.748, 0.8125]]
    assert outcome.ra == pytest.approx((0.9043 + 0.748 + 0.8125) / 3)


def test_missing_matrix_is_an_error():
    with pytest.raises(SystemExit, match="Task incremental accuracies"):
        cgate.parse_accuracies("Traceback (most recent call last):\n")


def test_patches_say_why_and_name_one_place_each():
    places = [(p.file, p.old) for p in cgate.PATCHES]
    assert len(set(places)) == len(places)
    assert all(p.why and p.old != p.new for p in cgate.PATCHES)


def test_the_rows_task_norms_are_cgates_batch_norms():
    """cgate builds nn.BatchNorm2d(num_channels, affine, track_running_stats) (src/freezable_layers.py:23), which
    makes eps and momentum True, that is 1.0; the row's overrides give cl-bench's per-task norms the same, and
    without them the backbone's stay."""
    import torch

    from cl_bench import api
    reference = torch.nn.BatchNorm2d(8, True, True)
    overrides = [o for o in cgate.ROWS["gated_task"].clbench if o.startswith("method.")]
    small = ["dataset=split_digits", "backbone=convnet", "backbone.channels=[8,16]", "scenario=task"]
    row = api.build(api.compose("method=gated", *small, *overrides)).method
    default = api.build(api.compose("method=gated", *small)).method
    for method, (eps, momentum) in ((row, (reference.eps, reference.momentum)), (default, (1e-5, 0.1))):
        norms = [bn for norm in method.norms for bn in norm.bns]
        assert norms and all(bn.eps == eps and bn.momentum == momentum for bn in norms)


# --- the learning row (gated_learn): cgate's SimpleCNN against cl-bench's gated_convnet -----------------------------
def composed(*overrides):
    from cl_bench import config
    config.register()
    cfg = config.compose([*overrides, "seed=0"])
    config.validate(cfg)
    return cfg


def test_the_learning_row_is_cgates_training_at_cl_benchs_defaults():
    """The row's cl-bench side: gated_convnet with cgate's two pools, cgate's training (as gated_task's), and
    the method's own defaults for the gate noise and the batch norms, which the diagnostic learn_quirks sets to
    cgate's (learn_gate_noise and learn_norms one of the two each); learn_own_pools gives the backbone its own pooling
    back."""
    row = cgate.ROWS["gated_learn"]
    assert set(cgate.MATCHED) < set(row.clbench) and set(cgate.MATCHED) < set(cgate.ROWS["gated_task"].clbench)
    assert not set(cgate.QUIRKS) & set(row.clbench) and set(cgate.QUIRKS) < set(cgate.ROWS["gated_task"].clbench)
    cfg = composed(*row.clbench)
    assert (cfg.backbone.name, list(cfg.backbone.channels), cfg.backbone.pools) == ("convnet", [100, 100, 100], 2)
    assert (cfg.method.gate_noise, cfg.method.norm_eps, cfg.method.norm_momentum) == ("logistic", None, None)
    assert (cfg.dataset.num_tasks, cfg.dataset.classes_per_task, cfg.dataset.samples_per_task,
            cfg.dataset.val_samples_per_task, cfg.dataset.test_samples_per_task, cfg.method.epochs) == (
        cgate.LEARN["tasks"], 2, cgate.LEARN["train"], cgate.LEARN["val"], cgate.LEARN["test"], cgate.LEARN["epochs"])
    assert cgate.LEARN["val"] % 64 == 0 and cgate.LEARN["test"] % 64 == 0 and cgate.LEARN["train"] % 64 != 1
    quirks = composed(*row.clbench, *cgate.DIAGNOSTICS["learn_quirks"].clbench)
    assert (quirks.method.gate_noise, quirks.method.norm_eps, quirks.method.norm_momentum) == ("gumbel", 1.0, 1.0)
    noise = composed(*row.clbench, *cgate.DIAGNOSTICS["learn_gate_noise"].clbench).method
    assert (noise.gate_noise, noise.norm_eps, noise.norm_momentum) == ("gumbel", None, None)
    norms = composed(*row.clbench, *cgate.DIAGNOSTICS["learn_norms"].clbench).method
    assert (norms.gate_noise, norms.norm_eps, norms.norm_momentum) == ("logistic", 1.0, 1.0)
    assert composed(*row.clbench, *cgate.DIAGNOSTICS["learn_own_pools"].clbench).backbone.pools is None
    settings = dict(s.split("=", 1) for s in row.reference)
    assert settings["ARCH"] == "'SimpleCNN'" and settings["CONV_CH"] == "100" and settings["SCHEDULER"] == "None"
    # Split MNIST as cgate reads it: one channel, no transforms (cfg.py's are CIFAR's: three-channel normalisation)
    assert (settings["DATASET_NAME"], settings["IN_CH"], settings["TRAIN_TRANSFORM"], settings["TEST_TRANSFORM"]) == (
        "'MNIST'", "1", "None", "None") and cfg.dataset.name == "split_mnist"
    assert (settings["N_TASKS"], settings["EPOCHS_PER_TASK"]) == (str(cgate.LEARN["tasks"]), str(cgate.LEARN["epochs"]))
    assert {p.kind for p in row.patches} == {common.ARCHITECTURE} and all(p.why for p in row.patches)


def test_the_learning_rows_gated_network_pools_after_two_units_as_simplecnn():
    """cl-bench's side of the pair: three gated units of 100 kernels, a max-pool after the first two only, so the
    third unit and the head's global average see 7x7 maps of MNIST's 28x28, as cgate's SimpleCNN (down, down,
    same)."""
    import torch
    from torch import nn

    from cl_bench import backbones
    from cl_bench.nn import gated
    net = backbones.build(composed(*cgate.ROWS["gated_learn"].clbench).backbone, (1, 28, 28))
    units = gated.convert(net, 5, 16)
    kinds = [type(m).__name__ for m in net.body if not isinstance(m, nn.Identity)]
    assert kinds == ["GatedUnit", "MaxPool2d", "GatedUnit", "MaxPool2d", "GatedUnit", "AdaptiveAvgPool2d", "Flatten"]
    net.eval()
    gated.route(gated.routed(net), [0])
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 100)
    assert [u.out_pixels for u in units] == [28 * 28, 14 * 14, 7 * 7]
    assert all(u.convs[0].bias is None for u in units)  # no conv bias: a batch norm follows each conv


def test_rows_patch_their_own_copy_and_their_diagnostics_carry_them(tmp_path, monkeypatch):
    """common.main: a row with patches of its own runs from a copy with them (after the module's), a row without
    from the module's; a diagnostic's copy has its row's and its own."""
    copies = []
    monkeypatch.setattr(common, "patched_copy", lambda ref, pinned, patches, work, any_commit=False, keep=None:
                        copies.append(list(patches)) or tmp_path / "ref")
    monkeypatch.setattr(common, "run_reference_side", lambda *args, **kwargs: None)
    monkeypatch.setattr(common, "run_clbench_side", lambda *args, **kwargs: None)
    base = ["cgate.py", "--ref", str(tmp_path), "--work", str(tmp_path / "work"), "--side", "reference"]
    monkeypatch.setattr(sys, "argv", [*base, "--pilot", "--rows", "gated_task", "gated_learn"])
    common.main(cgate)
    assert copies == [cgate.PATCHES, [*cgate.PATCHES, *cgate.LEARN_NET]]
    monkeypatch.setattr(sys, "argv", [*base, "--diagnostic", "cifar_stem"])
    common.main(cgate)
    assert copies[-1] == [*cgate.PATCHES, *cgate.STEM]
    from parity import summary
    lines = summary.patch_lines(cgate)
    assert sum(", row gated_learn only: " in line for line in lines) == len(cgate.LEARN_NET)


def test_the_learning_row_runs_its_plan_after_its_pilot_and_smoke_needs_its_own_out_folder(monkeypatch):
    from parity import plans
    assert ("cgate", "gated_learn") not in plans.PENDING and plans.PLANS[("cgate", "gated_learn")].upper_sd
    assert plans.seeds("cgate", "gated_learn", pilot=True) == (0, 1, 2)
    assert plans.seeds("cgate", "gated_learn") == tuple(range(plans.FIRST_SEED, plans.FIRST_SEED + 6))
    smoke_arguments_checked(cgate, "gated_learn", monkeypatch)
    smoke = cgate.ROWS["gated_learn"]
    assert f"dataset.samples_per_task={cgate.SMOKE['train']}" in smoke.clbench
    assert f"N_TASKS={cgate.SMOKE['tasks']}" in smoke.reference and smoke.patches == cgate.LEARN_NET
    composed(*smoke.clbench)


# Run with a checkout of lit-leo/cgate at the pinned commit (PARITY_CGATE_REF=DIR): the patches apply to its files,
# and the learning row's two networks, given the same weights, compute the same logits.
CHECKOUT = os.environ.get("PARITY_CGATE_REF")
NEEDS_CHECKOUT = pytest.mark.skipif(not CHECKOUT, reason="set PARITY_CGATE_REF to a checkout of lit-leo/cgate at the "
                                                         "pinned commit")


@NEEDS_CHECKOUT
def test_every_patch_applies_once_to_the_pinned_checkout(tmp_path):
    ref = Path(CHECKOUT)
    assert common.git_commit(ref) == cgate.PINNED
    for name, row in cgate.ROWS.items():
        common.patched_copy(ref, cgate.PINNED, [*cgate.PATCHES, *row.patches], tmp_path / name)  # exits otherwise
    for name, diag in cgate.DIAGNOSTICS.items():
        common.patched_copy(ref, cgate.PINNED, [*cgate.PATCHES, *cgate.ROWS[diag.row].patches, *diag.patches],
                            tmp_path / name)


# Run in cgate's patched copy (its cfg.py wants ROOT_DIR and its modules sit at the top level): both networks of the
# learning row with one set of weights, every gate open (second linear 0, bias +10: cgate's evaluation thresholds
# the logit at 0, as cl-bench's), random batch-norm affines and running statistics, cgate's eps 1 on both; prints
# the largest difference of the logits, and cgate's input channels.
SAME_NET = """
import ast, json, sys
import torch
from config import cfg
for setting in json.loads(sys.argv[1]):
    key, value = setting.split('=', 1)
    setattr(cfg, key, ast.literal_eval(value))
from src.model import ChannelGatedCL
from cl_bench import backbones
from cl_bench.nn import gated
torch.manual_seed(0)
theirs = ChannelGatedCL(in_ch=cfg.IN_CH, out_dim=2, conv_ch=cfg.CONV_CH).eval()
ours = backbones.build(json.loads(sys.argv[2]), (cfg.IN_CH, 28, 28))
units = gated.convert(ours, 1, 16)
head = torch.nn.Linear(ours.feature_dim, 2)
with torch.no_grad():
    for unit, block in zip(units, [layer[0] for layer in theirs.backbone.layers]):
        conv, norm = unit.body[0], unit.body[1].bns[0]
        block.conv2d.weight.copy_(conv.weight)
        block.conv2d.bias.zero_()
        bn = block.fbns[0].norm_class
        for name in ('weight', 'bias', 'running_mean'):
            getattr(norm, name).copy_(torch.randn(100))
        norm.running_var.copy_(torch.rand(100) + 0.5)
        norm.eps = bn.eps
        for name in ('weight', 'bias', 'running_mean', 'running_var'):
            getattr(bn, name).copy_(getattr(norm, name))
        block.fbns[0].reset_shadow_parameters()
        for gate in (unit.gates[0].fc2, block.gates[0][-1]):
            gate.weight.zero_()
            gate.bias.fill_(10.0)
    theirs.multihead_clf.heads[0][-1].weight.copy_(head.weight)
    theirs.multihead_clf.heads[0][-1].bias.copy_(head.bias)
    ours.eval()
    gated.route(gated.routed(ours), [0])
    x = torch.randn(8, cfg.IN_CH, 28, 28)
    mine = head(ours(x))
    out, _ = theirs(x, torch.zeros(8, dtype=torch.long))
print(json.dumps({"diff": (mine - out).abs().max().item(), "scale": out.abs().max().item(),
                  "in_ch": cfg.IN_CH}))
"""


def same_net(copy: Path, row, backbone: dict) -> dict:
    import json
    import subprocess
    env = {**os.environ, "ROOT_DIR": str(copy), "PYTHONPATH": f"{copy}{os.pathsep}{ROOT}", **common.one_thread_env()}
    done = subprocess.run([sys.executable, "-c", SAME_NET, json.dumps(row.reference), json.dumps(backbone)],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@NEEDS_CHECKOUT
def test_the_learning_rows_networks_are_one(tmp_path):
    """With the row's patches cgate's SimpleCNN is cl-bench's gated_convnet with backbone.pools=2, logit for logit;
    without the block-order patch (cgate's own conv, ReLU, pool, batch norm) or with cl-bench's own third pool,
    they differ."""
    row = cgate.ROWS["gated_learn"]
    backbone = {"name": "convnet", "channels": [100, 100, 100], "pools": 2}
    copy = common.patched_copy(Path(CHECKOUT), cgate.PINNED, [*cgate.PATCHES, *row.patches], tmp_path / "matched")
    matched = same_net(copy, row, backbone)
    assert matched["in_ch"] == 1 and matched["scale"] > 1e-2 and matched["diff"] < 1e-4 * max(1.0, matched["scale"])
    own_order = [p for p in row.patches if p.file != "src/blocks.py"]
    published = same_net(common.patched_copy(Path(CHECKOUT), cgate.PINNED, [*cgate.PATCHES, *own_order],
                                             tmp_path / "published"), row, backbone)
    assert published["diff"] > 1e-2
    assert same_net(copy, row, {**backbone, "pools": None})["diff"] > 1e-2


# Run in the learning row's patched copy: cgate's own freezing (src/model.py's freeze_relevant_kernels, on one
# validation batch) and its own save after a task, with each unit's task-0 gates set open on its first OPEN[i]
# channels and shut on the rest (second linear 0, bias +-10: evaluation thresholds the logit at 0).
OPEN = (7, 20, 45)
FROZEN_BY_CGATE = """
import ast, json, sys
import torch
from config import cfg
for setting in json.loads(sys.argv[1]):
    key, value = setting.split('=', 1)
    setattr(cfg, key, ast.literal_eval(value))
from src.model import ChannelGatedCL, freeze_relevant_kernels
torch.manual_seed(0)
model = ChannelGatedCL(in_ch=cfg.IN_CH, out_dim=2, conv_ch=cfg.CONV_CH, freeze_fixed_proc=cfg.FREEZE_FIXED_PROC,
                       freeze_top_proc=cfg.FREEZE_TOP_PROC, freeze_prob_thr=cfg.FREEZE_PROB_THR)  # as src/train.py
with torch.no_grad():
    for layer, n_open in zip(model.backbone.layers, json.loads(sys.argv[2])):
        gate = layer[0].gates[0][-1]
        gate.weight.zero_()
        gate.bias.fill_(-10.0)
        gate.bias[:n_open] = 10.0
batch = (torch.randn(16, cfg.IN_CH, 28, 28), torch.zeros(16, dtype=torch.long), torch.zeros(16, dtype=torch.long))
freeze_relevant_kernels(model, [batch], task_identifier=0, verbose=False)
model.save_model_state_dict('after_task_0.ckpt')
"""


@NEEDS_CHECKOUT
def test_the_reference_phases_read_the_kernels_cgate_froze(tmp_path):
    """reference_phases counts what cgate's own freezing marked and its own save wrote after a task: the kernels
    whose gates fired on validation, here every open one and no shut one."""
    import json
    import subprocess
    row = cgate.ROWS["gated_learn"]
    copy = common.patched_copy(Path(CHECKOUT), cgate.PINNED, [*cgate.PATCHES, *row.patches], tmp_path / "copy")
    assert cgate.reference_phases(copy) == []  # nothing saved yet
    env = {**os.environ, "ROOT_DIR": str(copy), "PYTHONPATH": str(copy), **common.one_thread_env()}
    done = subprocess.run([sys.executable, "-c", FROZEN_BY_CGATE, json.dumps(row.reference), json.dumps(OPEN)],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert cgate.reference_phases(copy) == [{"task": 0, "frozen": sum(OPEN)}]


@pytest.mark.slow  # a whole run
def test_the_clbench_phases_are_the_kernels_each_task_left_frozen(tmp_path):
    """clbench_phases reads a cl-bench gated run's kernels frozen after each task: non-decreasing (a frozen kernel
    stays frozen), the last the run's final capacity; a folder without events gives none."""
    from conftest import train
    assert cgate.clbench_phases(tmp_path) == []
    metrics = train(tmp_path / "run", "method=gated", "scenario=task", "dataset.num_tasks=3", "backbone=convnet",
                    "backbone.channels=[8,16]", "method.epochs=1", "checkpoint.keep=1")
    phases = cgate.clbench_phases(tmp_path / "run")
    assert [p["task"] for p in phases] == [0, 1, 2]
    frozen = [p["frozen"] for p in phases]
    assert frozen == sorted(frozen) and 0 < frozen[0] and frozen[-1] == metrics["capacity"]["kernels_frozen"] <= 24


def test_seeds_choose_part_of_a_diagnostics_seeds(tmp_path, monkeypatch):
    """--seeds with --diagnostic runs only those of the diagnostic's seeds (it once ran all of them), and refuses a
    seed outside them."""
    ran = []
    monkeypatch.setattr(common, "run_clbench_side", lambda reference, row, name, seed, *args: ran.append(seed))
    base = ["cgate.py", "--ref", str(tmp_path), "--work", str(tmp_path / "work"), "--diagnostic", "learn_quirks"]
    monkeypatch.setattr(sys, "argv", [*base, "--seeds", "0"])
    common.main(cgate)
    assert ran == [0]
    monkeypatch.setattr(sys, "argv", [*base, "--seeds", "7"])
    with pytest.raises(SystemExit, match="not among"):
        common.main(cgate)
