"""The ivclab/CPG parity runner (scripts/parity/cpg.py) without the reference or real data: the tasks it writes
read back as exactly cl-bench's split, what it parses from the reference's output, and that both sides run the
same cut."""
import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from parity import common, cpg  # noqa: E402


def write_cifar10(root: Path, per_class: int = 6, test_per_class: int = 4) -> None:
    """Small canonical cifar-10-batches-py files: random pixels, every class in every batch."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        count = 10 * (test_per_class if name == "test_batch" else per_class)
        x = rng.integers(0, 256, (count, 3 * 32 * 32), dtype=np.uint8)
        batch = {b"batch_label": name.encode(), b"data": x, b"labels": [i % 10 for i in range(count)],
                 b"filenames": [f"{i}.png".encode() for i in range(count)]}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=3))


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_cifar10(root)
    return common.scenario(common.clbench_overrides(cpg.ROWS["cpg"], 0, str(root)))


def test_written_tasks_read_back_as_the_split(split, tmp_path):
    cpg.write_tasks(split, cpg.ROWS["cpg"], tmp_path)
    tasks = cpg.read_tasks(tmp_path)
    assert len(tasks) == len(split.tasks) == cpg.TASKS
    for t, task in enumerate(split.tasks):
        for part, got in (("train", task.train), ("test", split.test[t])):
            x, y = tasks[t][part]
            assert np.array_equal(x, got.x.cpu().numpy())
            assert y.tolist() == (got.y - task.offset).tolist()
            assert sorted(set(y.tolist())) == list(range(cpg.CLASSES))


def test_written_statistics_and_goals(split, tmp_path):
    from cl_bench.data.batches import channel_stats
    cpg.write_tasks(split, cpg.ROWS["cpg"], tmp_path)
    stats = json.loads((tmp_path / "stats.json").read_text())
    goals = json.loads((tmp_path / "goals.json").read_text())
    for t, task in enumerate(split.tasks):
        mean, std = channel_stats(task.train.x)
        assert stats[f"task{t}"] == {"mean": mean, "std": std}
        assert goals[f"task{t}"] == cpg.GOAL
    # cl-bench normalises each task with the same statistics under protocol=official: shift row t is -mean/std
    shift = split.info.view.shift.reshape(len(split.tasks), -1).cpu()
    for t in range(len(split.tasks)):
        expected = -torch.tensor(stats[f"task{t}"]["mean"]) / torch.tensor(stats[f"task{t}"]["std"])
        assert torch.allclose(shift[t].float(), expected, atol=1e-5)


CPG_OUTPUT = """2026-12-02 08:38:09,419 - root - INFO - In validate()-> Val Ep. #1 loss: 0.694, accuracy: 49.00, \
sparsity: 0.000, task1 ratio: 1.000, zero ratio: 0.000, mpl: 1.0
Val Ep. #1:  50%|#####     | 1/2 [00:01<00:01,  1.18s/it, loss=0.429, accuracy=78.00, sparsity=0, mpl=1]
Val Ep. #1: 100%|##########| 2/2 [00:02<00:00,  1.20s/it, loss=0.474, accuracy=49.00, sparsity=0, mpl=1]
"""
PACKNET_OUTPUT = """Validate Epoch  #3:  50%|#####     | 1/2 [00:01<00:01, loss=0.41, accuracy=81.00, sparsity=0.6]
Validate Epoch  #3: 100%|##########| 2/2 [00:02<00:00, loss=0.43, accuracy=79.50, sparsity=0.6]
"""


def test_parses_the_last_printed_accuracy():
    assert cpg.parse_accuracy(CPG_OUTPUT) == pytest.approx(0.49)
    assert cpg.parse_accuracy(PACKNET_OUTPUT) == pytest.approx(0.795)
    with pytest.raises(ValueError):
        cpg.parse_accuracy("Traceback (most recent call last):")


ALL_ROWS = {**cpg.ROWS, **{f"smoke:{n}": r for n, r in cpg.learn_rows(cpg.SMOKE).items()}}


@pytest.mark.parametrize("name", sorted(ALL_ROWS))
def test_both_sides_run_the_same_cut(name):
    """Every row's overrides compose and validate, and say what its reference arguments say (the --smoke rows too)."""
    from cl_bench import config
    config.register()
    row = ALL_ROWS[name]
    cfg = config.compose(common.clbench_overrides(row, 0))
    config.validate(cfg)
    ref = cpg.settings(row)
    learning = "width" in ref
    assert cfg.method.protocol == "official" and cfg.backbone.name == "vgg16_bn"
    cut = (cpg.SMOKE if name.startswith("smoke:") else cpg.LEARN) if learning else None
    assert cfg.dataset.num_tasks == (cut.tasks if learning else cpg.TASKS) and cfg.dataset.classes_per_task == 2
    assert cfg.method.epochs == int(ref["epochs"])
    if learning:  # the network and the schedule, set on the reference through ENV_SETTINGS
        assert (cfg.backbone.width, cfg.backbone.hidden) == (float(ref["width"]), int(ref["hidden"]))
        assert list(cfg.method.lr_milestones) == [int(v) for v in ref["lr_drops"].split(",")]
        assert set(ref) - set(cpg.ENV_SETTINGS) >= {"program", "epochs"}
    if ref["program"] == "cpg":
        assert list(cfg.method.prune_targets) == [float(v) for v in ref["prune_targets"].split(",")]
        assert cfg.method.prune_epochs == int(ref["prune_epochs"])
        assert cfg.method.prune_ramp_epochs == int(ref["pruning_interval"])
        assert cfg.method.prune_frequency == int(ref["pruning_frequency"])
        assert cfg.method.retrain_epochs == int(ref["retrain_epochs"])
        assert cfg.method.train_acc_bar == float(ref["train_acc_bar"])
        assert cfg.method.allow_acc_loss == float(ref.get("allow_acc_loss", 0.0))  # the chooser's tolerance
        assert cfg.method.max_multiplier == float(ref["max_multiplier"])
        assert cfg.method.picking == (float(ref["lr_mask"]) > 0) == (ref["refit"] == "true")
        if learning:  # growth on, each side measuring its own scratch goals
            assert cfg.method.goal_source == "independent" and ref["goals"] == "scratch"
            assert list(cfg.method.mask_lr_milestones) == [int(ref["mask_drop"])]
            assert cfg.method.mask_lr_stop == int(ref["mask_stop"])
            assert cfg.method.retrain_epochs < min(cfg.method.lr_milestones)  # the refit drops no lr on either side
        else:
            assert cfg.method.goal_source == "fixed" and cfg.method.goal == float(ref["goal"])
    else:
        assert cfg.method.prune_ratio == float(ref["one_shot_prune_perc"])
        assert cfg.method.retrain_epochs == int(ref["retrain_epochs"])
        if learning:
            assert list(cfg.method.retrain_lr_milestones) == [int(ref["retrain_drop"])]


def test_the_learning_cut_sets_one_bar_and_one_chooser_tolerance_on_both_sides():
    """The cut as revised after its first pilot stopped (the module docstring): the scripts' bars (0.95, 0.97) are
    beyond 30 epochs at a quarter width, so 0.85 on both sides; the choosing tool's tolerance 0.01 on both sides."""
    rows = cpg.learn_rows(cpg.LEARN)
    assert {name: cpg.settings(rows[name])["train_acc_bar"] for name in rows} == dict.fromkeys(rows, "0.85")
    assert {name: cpg.settings(rows[name])["allow_acc_loss"] for name in ("cpg_learn", "pae_learn")} == {
        "cpg_learn": "0.01", "pae_learn": "0.01"}
    assert cpg.Cut.allow_acc_loss == 0.0 and cpg.Cut.bar == 0.95  # the scripts' own, where a cut does not say
    assert cpg.LEARN.tasks >= 5 and set(rows) <= set(cpg.ROWS)


def test_patches_are_distinct_and_explained():
    keys = [(p.file, p.old) for p in cpg.PATCHES]
    assert len(set(keys)) == len(keys) and all(p.why for p in cpg.PATCHES)


def test_every_variable_the_runner_sets_is_read_by_a_patch():
    """patches/cpg.yaml holds the patches as text: a variable renamed on one side only would go unread."""
    read = "".join(p.new for p in cpg.PATCHES)
    assert [name for name in cpg.ENV_SETTINGS.values() if name not in read] == []


FAKE_PYTHON = """#!/bin/sh
# Stands in for the reference's interpreter: records each call, saves a checkpoint into --save_folder (unless
# nosave exists), writes a goal into --logfile, asks once for growth (forever if growforever exists), prints the
# choosing tool's line and an accuracy.
echo "$*" >> calls.txt
prev=""; logfile=""; ds=""
for a in "$@"; do
  case "$prev" in
    --save_folder) mkdir -p "$a"; [ -e nosave ] || touch "$a/checkpoint-3.pth.tar" ;;
    --logfile) logfile="$a" ;;
    --dataset) ds="$a" ;;
  esac
  prev="$a"
done
if [ -n "$logfile" ]; then  # the baseline adds its task's goal to the file, as packnet_cifar100_main_normal.py
  old=$(sed 's/^{//; s/}$//' "$logfile"); printf '{%s"%s": "0.6000"}' "${old:+$old, }" "$ds" > "$logfile"
fi
case "$*" in
  *choose_appropriate*) echo "2026-12-02 08:40:00,001 - root - INFO - We choose pruning_ratio 0.3"; exit 0 ;;
  CPG_*"--finetune_again"*) ;;
  CPG_*"--mode finetune"*) grown=checkpoints/parity/grown  # kept in the runs folder, as the reference's widths
    if [ -e growforever ] || [ ! -e $grown ]; then touch $grown; exit 2; fi ;;
esac
echo "In validate()-> Val Ep. #1 loss: 0.5, accuracy: 61.50"
"""


def fake_reference(tmp_path, tasks: int = 3) -> tuple[Path, Path, Path]:
    copy, data = tmp_path / "ref", tmp_path / "tasks"
    (copy / "data").mkdir(parents=True)
    for t in range(tasks):
        for c in range(cpg.CLASSES):
            (data / "train" / f"task{t}" / cpg.class_folder(c)).mkdir(parents=True)
    (data / "goals.json").write_text("{}")
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return copy, data, python


def test_reference_phases_run_in_the_scripts_order(tmp_path):
    """The CPG sequence per task against a stand-in interpreter: growth retried at the next width, both
    sparsity targets, the choosing tool, the refit from the second task on, then every learned task evaluated."""
    copy, data, python = fake_reference(tmp_path)
    outcome = cpg.run_reference(copy, cpg.ROWS["cpg"], 0, data, str(python))
    assert outcome.ra == pytest.approx(0.615) and [len(r) for r in outcome.matrix] == [1, 2, 3]
    calls = (copy / "calls.txt").read_text().splitlines()
    mains = [c for c in calls if "--mode" in c]
    assert "--network_width_multiplier 1.0" in mains[0] and "--network_width_multiplier 1.5" in mains[1]
    assert sum("--finetune_again" in c for c in calls) == 2  # tasks 1 and 2
    assert sum("--mode prune" in c for c in calls) == 3 * len(cpg.PRUNE_TARGETS)
    assert sum("--mode inference" in c for c in calls) == 6
    assert sum("choose_appropriate" in c for c in calls) == 3 and sum("choose_retrain" in c for c in calls) == 2
    assert all("--seed 0" in c for c in mains)


def test_learning_rows_measure_goals_and_record_each_tasks_decisions(tmp_path):
    """cpg_learn against the stand-in: baseline_cifar100.sh's scratch model before each task writes its goal, the
    cut's PARITY_* settings reach the reference, and each task's goal, growth, chosen sparsity and refit are kept."""
    copy, data, python = fake_reference(tmp_path, tasks=2)
    row = cpg.ROWS["cpg_learn"]
    outcome = cpg.run_reference(copy, row, 0, data, str(python))
    calls = (copy / "calls.txt").read_text().splitlines()
    baselines = [c for c in calls if c.startswith("packnet_cifar100_main_normal.py") and "--logfile" in c]
    assert [c.split("--dataset ")[1].split()[0] for c in baselines] == ["task0", "task1"]
    first_cpg = next(i for i, c in enumerate(calls) if "--dataset task1" in c and c.startswith("CPG_"))
    assert calls.index(baselines[1]) < first_cpg  # the goal is measured before the task trains
    chooser = [c for c in calls if c.startswith("tools/choose_appropriate")]
    assert chooser and all("--allow_acc_loss 0.01 " in c for c in chooser)  # the cut's tolerance, not the scripts' 0
    assert [p["task"] for p in outcome.phases] == [0, 1]
    assert outcome.phases[0] | {"record": None} == {"task": 0, "goal": 0.6, "start": 1.0, "record": None,
                                                   "multiplier": 1.5, "grew": 0.5, "ratio": 0.3, "refit": "not run"}
    assert outcome.phases[1]["grew"] == 0.0 and outcome.phases[1]["start"] == 1.5
    assert outcome.phases[1]["refit"] == "kept" and outcome.phases[1]["refit_checkpoint"] == "checkpoint-3.pth.tar"


def test_learning_rows_settings_reach_the_reference_as_variables(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(cpg, "Runner", lambda copy, seed, python, log, env, ended: seen.append(env) or (
        _ for _ in ()).throw(SystemExit("stop")))
    copy, data, python = fake_reference(tmp_path, tasks=1)
    with pytest.raises(SystemExit):
        cpg.run_reference(copy, cpg.ROWS["packnet_learn"], 0, data, str(python))
    env = seen[0]
    assert (env["PARITY_WIDTH"], env["PARITY_HIDDEN"], env["PARITY_LR_DROPS"]) == ("0.25", "1024", "15,24")
    assert env[cpg.BAR_ENV] == "0.85" and env["PARITY_RETRAIN_DROP"] == str(cpg.LEARN.packnet_drop)
    seen.clear()
    with pytest.raises(SystemExit):
        cpg.run_reference(copy, cpg.ROWS["cpg"], 0, data, str(python))
    assert "PARITY_WIDTH" not in {k for k in seen[0] if k not in os.environ}  # the old rows: the scripts' network


def test_reference_phases_that_would_start_from_nothing_are_refused(tmp_path):
    copy, data, python = fake_reference(tmp_path, tasks=1)
    (copy / "nosave").touch()
    with pytest.raises(SystemExit, match="saved no checkpoint after training task0.*bar 0.85"):
        cpg.run_reference(copy, cpg.ROWS["cpg_learn"], 0, data, str(python))
    copy, data, python = fake_reference(tmp_path / "again", tasks=1)
    (copy / "growforever").touch()
    with pytest.raises(SystemExit, match="grow task0 past max_multiplier 1.5"):
        cpg.run_reference(copy, cpg.ROWS["cpg_learn"], 0, data, str(python))
    copy, data, python = fake_reference(tmp_path / "packnet", tasks=1)
    (copy / "nosave").touch()
    with pytest.raises(SystemExit, match="saved no checkpoint after pruning task0.*bar 0.85"):
        cpg.run_reference(copy, cpg.ROWS["packnet_learn"], 0, data, str(python))


# The reference's own lines, as its code prints them (utils.set_logger's format, the tools' logging calls).
CHOOSER_OUTPUT = """2026-12-04 10:31:02,118 - root - INFO - We choose pruning_ratio 0.6
"""
CHOOSER_NONE = "2026-12-04 10:31:02,118 - root - INFO - We choose pruning_ratio 0.0\n"
RECORD_TXT = '{"0.0": 0.853, "0.2": 0.861, "0.4": 0.855, "0.6": 0.8545, "0.8": 0.81}'
GOALS_JSON = '{"task0": "0.8530", "task1": "0.7915"}'
# cl-bench's train.log (Hydra's format around cl_bench/methods/cpg.py's log lines)
CLBENCH_LOG = """[2026-12-04 10:40:01,002][cl_bench.methods.cpg][INFO] - task 0: independent goal models' selection \
accuracies 0.8530
[2026-12-04 10:41:01,002][cl_bench.methods.cpg][INFO] - task 0: goal 0.8530; at 1.0x: selection acc 0.8400, train \
acc 0.9612
[2026-12-04 10:42:01,002][cl_bench.methods.cpg][INFO] - task 0: grown to 1.5x: selection acc 0.8610, train acc 0.9750
[2026-12-04 10:43:01,002][cl_bench.methods.cpg][INFO] - task 0: sparsity 0.2: reached 0.2000, selection acc 0.8620, \
train acc 0.9800
[2026-12-04 10:44:01,002][cl_bench.methods.cpg][INFO] - task 0: keeps sparsity 0.4013 (target 0.4; criterion 0.8530)
[2026-12-04 10:45:01,002][cl_bench.methods.cpg][INFO] - task 1: goal 0.7915; at 1.5x: selection acc 0.8000, train \
acc 0.9700
[2026-12-04 10:46:01,002][cl_bench.methods.cpg][INFO] - task 1: sparsity 0.2: train acc 0.9400, compacting stops
[2026-12-04 10:47:01,002][cl_bench.methods.cpg][INFO] - task 1: keeps sparsity 0.0000 (target 0.0; criterion 0.7915)
[2026-12-04 10:48:01,002][cl_bench.methods.cpg][INFO] - task 1: picking refit kept, 0.8050 (epochs' best 0.8050, \
compacted 0.8000, restarted mask 0.7000)
[2026-12-04 10:49:01,002][cl_bench.methods.cpg][INFO] - task 2: goal 0.9000; at 1.5x: selection acc 0.9100, train \
acc 0.9900
[2026-12-04 10:50:01,002][cl_bench.methods.cpg][INFO] - task 2: picking refit kept nothing
"""


def test_phase_parsers_read_the_printed_formats(tmp_path):
    assert cpg.parse_chosen_ratio(CHOOSER_OUTPUT) == 0.6 and cpg.parse_chosen_ratio(CHOOSER_NONE) == 0.0
    with pytest.raises(ValueError):
        cpg.parse_chosen_ratio("Traceback (most recent call last):")
    assert cpg.parse_record(RECORD_TXT) == {"0.0": 0.853, "0.2": 0.861, "0.4": 0.855, "0.6": 0.8545, "0.8": 0.81}
    assert cpg.parse_goal(GOALS_JSON, "task1") == pytest.approx(0.7915) and cpg.parse_goal("{}", "task0") is None
    assert cpg.refit_outcome(tmp_path / "absent") == {"refit": "not kept"}
    (tmp_path / "retrain").mkdir()
    (tmp_path / "retrain" / "record.txt").write_text("{}")
    assert cpg.refit_outcome(tmp_path / "retrain") == {"refit": "not kept"}
    (tmp_path / "retrain" / "checkpoint-4.pth.tar").touch()
    assert cpg.refit_outcome(tmp_path / "retrain") == {"refit": "kept", "refit_checkpoint": "checkpoint-4.pth.tar"}
    # The reference's refit: its first validation is the restarted mask's, then one an epoch (accuracy in %)
    refit = "\n".join(f"INFO - In validate()-> Val Ep. #{e} loss: 0.412, accuracy: {a:.2f}, sparsity: 0.600"
                      for e, a in enumerate((70.0, 79.5, 81.25, 80.0)))
    assert cpg.reference_refit_scores(refit, 0.8) == {"refit_best": 0.8125, "compacted": 0.8, "restarted": 0.7,
                                                      "refit_gain": 0.0125}
    assert cpg.reference_refit_scores(refit, None) == {} and cpg.reference_refit_scores("exit 5", 0.8) == {}
    phases = cpg.parse_clbench_phases(CLBENCH_LOG)
    assert phases == [
        {"task": 0, "goal": 0.853, "start": 1.0, "multiplier": 1.5, "grew": 0.5, "ratio": 0.4, "refit": "not run"},
        {"task": 1, "goal": 0.7915, "start": 1.5, "multiplier": 1.5, "grew": 0.0, "ratio": 0.0, "refit": "kept",
         "refit_best": 0.805, "compacted": 0.8, "restarted": 0.7, "refit_gain": 0.005},
        {"task": 2, "goal": 0.9, "start": 1.5, "multiplier": 1.5, "grew": 0.0, "ratio": 0.0, "refit": "not kept"}]
    (tmp_path / "run").mkdir()
    assert cpg.clbench_phases(tmp_path / "run") == []
    (tmp_path / "run" / "train.log").write_text(CLBENCH_LOG)
    assert cpg.clbench_phases(tmp_path / "run") == phases


def test_cl_benchs_refit_line_reads_back_as_its_scores(monkeypatch, caplog):
    """The line cl-bench's CPG logs at a task's refit is the one the harness parses into the record's scores."""
    from test_packnet_cpg import COMMON, TINY, build
    _, tasks, make = build(*TINY["cpg"], *COMMON)
    method = make()
    method.learn(tasks[0])
    method.begin_task(1)
    accs = iter([0.7, 0.76, 0.74] + [0.7] * 10)  # the restarted mask, then the refit's epochs
    monkeypatch.setattr(method, "accuracy", lambda split, task_id, model=None: next(accs))
    monkeypatch.setattr(method, "train_weights", lambda *a, after_epoch=None, **k: [after_epoch(e) for e in range(3)])
    monkeypatch.setattr(method, "snapshot", lambda: "a state")
    monkeypatch.setattr(method, "restore", lambda snap: None)
    caplog.clear()  # task 0's lines, where an earlier test left the package's loggers at INFO
    with caplog.at_level(logging.INFO, logger="cl_bench.methods.cpg"):
        method.refit_picking(tasks[1], acc=0.78)
    log = "task 1: goal none; at 1.0x:\n" + "\n".join(r.getMessage() for r in caplog.records)
    [phase] = cpg.parse_clbench_phases(log)
    assert phase["refit"] == "kept" and phase["refit_gain"] == pytest.approx(-0.02)  # kept below the compacted model
    assert (phase["refit_best"], phase["compacted"], phase["restarted"]) == (0.76, 0.78, 0.7)


PINNED = ROOT / "tests" / "data" / "cpg_pinned"


def pinned_excerpt(file: str) -> str:
    return (PINNED / (file.replace("/", "__") + ".txt")).read_text()


def patched_excerpts() -> dict[str, str]:
    """The pinned excerpts with every width and schedule patch applied, each matching exactly once."""
    texts = {}
    for patch in cpg.PATCHES:
        if "PARITY_" in patch.new and cpg.BAR_ENV not in patch.new:
            text = texts.get(patch.file) or pinned_excerpt(patch.file)
            assert text.count(patch.old) == 1, patch.why
            texts[patch.file] = text.replace(patch.old, patch.new)
    return texts


def test_width_and_schedule_patches_apply_to_the_pinned_files():
    texts = patched_excerpts()
    assert set(texts) == {"models/vgg.py", "packnet_models/vgg.py", "CPG_cifar100_main_normal.py",
                          "packnet_cifar100_main_normal.py"}
    assert all("PARITY_" in text for text in texts.values())
    assert {p.kind for p in cpg.PATCHES if "PARITY_WIDTH" in p.new or "PARITY_HIDDEN" in p.new} == {common.ARCHITECTURE}
    assert "nn.Linear(4096" not in texts["packnet_models/vgg.py"] and "512" not in texts["packnet_models/vgg.py"]
    assert "(4096" not in texts["models/vgg.py"] and "* 4096" not in texts["models/vgg.py"]
    assert "epoch_idx + 1 == 50" not in texts["CPG_cifar100_main_normal.py"]


def build_reference_vgg(text: str, monkeypatch, env: dict, cpg_builder: bool, multiplier: float = 1.0):
    """Execute a patched excerpt with the reference's masked layers stood in by torch's own (same shapes)."""
    import types

    from torch import nn
    layers = types.ModuleType("models.layers")
    layers.SharableConv2d, layers.SharableLinear = nn.Conv2d, nn.Linear
    package = types.ModuleType("models")
    package.layers = layers
    monkeypatch.setitem(sys.modules, "models", package)
    monkeypatch.setitem(sys.modules, "models.layers", layers)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    scope = {}
    exec(compile(text.replace("class Sequential_Debug", "class _Debug"), "excerpt", "exec"), scope)
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    return scope["make_layers_cifar100"](cfg, multiplier, batch_norm=True) if cpg_builder else \
        scope["make_layers_cifar100"](cfg, batch_norm=True)


def shapes(net) -> list[tuple]:
    from torch import nn
    return [tuple(m.weight.shape) for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


@pytest.mark.parametrize("file", ["models/vgg.py", "packnet_models/vgg.py"])
def test_the_narrowed_reference_network_is_cl_benchs(file, monkeypatch):
    """At the learning cut's width both reference builders give cl-bench's vgg16_bn layer for layer; unset, the
    scripts' own network; grown (CPG), every shared width is int(narrowed x sqrt(1.5)), as cl-bench grows."""
    import math

    import torch

    from cl_bench.backbones.vgg import VGG16BN
    text = patched_excerpts()[file]
    if file == "packnet_models/vgg.py":  # the excerpt's Sequential_Debug: its forward is all it defines
        text = text.replace("return Sequential_Debug(*layers)", "return nn.Sequential(*layers)")
    env = {"PARITY_WIDTH": str(cpg.LEARN.width), "PARITY_HIDDEN": str(cpg.LEARN.hidden)}
    cpg_builder = file == "models/vgg.py"
    ours = VGG16BN((3, 32, 32), cpg.LEARN.hidden, cpg.LEARN.width)
    narrowed = build_reference_vgg(text, monkeypatch, env, cpg_builder)
    assert shapes(narrowed) == shapes(ours)
    assert narrowed(torch.zeros(2, 3, 32, 32)).shape == (2, cpg.LEARN.hidden)
    scripts = build_reference_vgg(text, monkeypatch, {"PARITY_WIDTH": "1", "PARITY_HIDDEN": "4096"}, cpg_builder)
    assert shapes(scripts) == shapes(VGG16BN((3, 32, 32), 4096, 1.0))
    if cpg_builder:
        grown = build_reference_vgg(text, monkeypatch, env, True, math.sqrt(1.5))
        assert [s[0] for s in shapes(grown)] == [int(s[0] * math.sqrt(1.5)) for s in shapes(ours)]


@pytest.mark.skipif(not os.environ.get("PARITY_CPG_REF"), reason="set PARITY_CPG_REF to a checkout of ivclab/CPG at "
                    "the pinned commit to check the excerpts against it")
def test_the_excerpts_are_the_pinned_files():
    ref = Path(os.environ["PARITY_CPG_REF"])
    assert common.git_commit(ref) == cpg.PINNED
    for path in PINNED.glob("*.txt"):
        whole = (ref / path.name[:-4].replace("__", "/")).read_text().splitlines()
        assert all(line in whole for line in path.read_text().splitlines()), path.name
    for patch in cpg.PATCHES:
        assert (ref / patch.file).read_text().count(patch.old) == 1, patch.why


def test_the_learning_rows_run_their_plans_after_their_pilots():
    from parity import plans
    for name in ("cpg_learn", "packnet_learn", "pae_learn"):  # their pilots ran
        assert ("cpg", name) in plans.PLANS and ("cpg", name) not in plans.PENDING
        assert plans.seeds("cpg", name)[0] == plans.FIRST_SEED
        assert plans.seeds("cpg", name, pilot=True) == plans.PILOT_SEEDS == (0, 1, 2)
    # pae_learn's plan was fixed after the rule began sizing from the sd's upper bound (2026-12-05)
    plan = plans.PLANS[("cpg", "pae_learn")]
    assert plan.upper_sd and plan.cpu_hours == plans.LEARN_CPU_HOURS
    assert plans.planned(plan.pilot_sd, plan.pair_seconds, plan.cpu_hours, upper_from=plan.pilot) == (plan.needed,
                                                                                                       plan.n)


def smoke_arguments_checked(module, row: str, monkeypatch) -> None:
    """common.smoke through a reference module's smoke(): argv untouched without --smoke, refused without --out;
    else --smoke dropped and only the shrunk rows' pilot run (every such row, or those --rows names), never another
    row's cut or a plan's seeds: seed 0 of the pilot; the module's rows restored after the test."""
    monkeypatch.setattr(module, "ROWS", dict(module.ROWS))
    script = f"{module.NAME}.py"
    full = next(name for name in module.ROWS if not name.endswith("_learn"))
    assert module.smoke([script, "--rows", full]) == [script, "--rows", full]
    with pytest.raises(SystemExit, match="--smoke needs --out"):
        module.smoke([script, "--smoke"])
    shrunk = [name for name in module.ROWS if name.endswith("_learn")]
    assert module.smoke([script, "--smoke", "--out", "/tmp/x"]) == [script, "--out", "/tmp/x", "--rows", *shrunk,
                                                                    "--pilot", "--seeds", "0"]
    assert module.smoke([script, "--smoke", "--rows", row, "--out", "/tmp/x", "--pilot", "--seeds", "1"]) == [
        script, "--rows", row, "--out", "/tmp/x", "--pilot", "--seeds", "1"]
    with pytest.raises(SystemExit, match=f"--smoke runs only the learning rows .*, not {full}: drop --smoke"):
        module.smoke([script, "--smoke", "--rows", row, full, "--out", "/tmp/x"])


def test_smoke_needs_its_own_out_folder(monkeypatch):
    smoke_arguments_checked(cpg, "pae_learn", monkeypatch)
    assert cpg.settings(cpg.ROWS["cpg_learn"])["epochs"] == str(cpg.SMOKE.epochs)


def commands(log: Path) -> list[str]:
    return [e.command for e in cpg.read_log(log.read_text())]


@pytest.mark.parametrize("cut", ["inside_a_task", "between_tasks", "before_any"])
def test_a_reference_run_cut_short_resumes_to_the_same_outcome(tmp_path, cut):
    """--resume against the stand-in: the processes the log records are replayed, not run; the task the run was
    cut in starts over (its folder's leftovers gone, the log cut back to its start); the outcome, the decisions and
    the log's sequence of commands are those of the run never cut; the replayed seconds are counted."""
    copy, data, python = fake_reference(tmp_path, tasks=2)
    row, log = cpg.ROWS["cpg_learn"], data / "reference.log"
    whole = cpg.run_reference(copy, row, 0, data, str(python))
    full, ended = commands(log), cpg.read_log(log.read_text())
    task1 = next(i for i, e in enumerate(ended) if "--dataset task1" in e.command)
    kept = {"inside_a_task": task1 + 2, "between_tasks": task1, "before_any": 0}[cut]
    cut_at = ended[kept - 1].end if kept else 0
    log.write_text(log.read_text()[:cut_at] + f"$ {python} half a process's entry\n")  # killed while it wrote
    (copy / cpg.RUNS / "task1").mkdir(parents=True, exist_ok=True)
    (copy / cpg.RUNS / "task1" / "left.pth.tar").touch()  # what the killed process left
    (copy / "calls.txt").unlink()
    resumed = cpg.run_reference(copy, row, 0, data, str(python), resume=True)
    assert (resumed.ra, resumed.matrix, resumed.phases) == (whole.ra, whole.matrix, whole.phases)
    assert commands(log) == full
    rerun = (copy / "calls.txt").read_text().splitlines()
    first_live = task1 if cut != "before_any" else 0
    assert len(rerun) == len(full) - first_live  # task 1 (or all) run again, nothing before it
    assert not (copy / cpg.RUNS / "task1" / "left.pth.tar").exists()
    assert resumed.replayed == pytest.approx(sum(e.seconds for e in ended[:first_live]))


def test_a_resume_refuses_another_runs_log(tmp_path):
    copy, data, python = fake_reference(tmp_path, tasks=1)
    cpg.run_reference(copy, cpg.ROWS["cpg_learn"], 0, data, str(python))
    with pytest.raises(SystemExit, match="--resume: .* the log is another run's"):
        cpg.run_reference(copy, cpg.ROWS["pae_learn"], 0, data, str(python), resume=True)


def test_a_resumed_copy_keeps_its_runs_and_a_resume_that_cannot_work_is_refused(tmp_path, monkeypatch):
    """The patched copy is made afresh around the runs folder a resume needs; --resume with a diagnostic, or on
    the reference side of a runner that cannot replay (cgate's), stops in one line before any work."""
    ref = tmp_path / "checkout"
    ref.mkdir()
    (ref / "main.py").write_text("print(1)\n")
    git = ["git", "-C", str(ref), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    pinned, work = common.git_commit(ref), tmp_path / "work"
    copy = common.patched_copy(ref, pinned, [], work)
    (copy / cpg.RUNS / "task0").mkdir(parents=True)
    (copy / cpg.RUNS / "task0" / "checkpoint-3.pth.tar").write_text("weights")
    (copy / "main.py").write_text("changed\n")
    copy = common.patched_copy(ref, pinned, [], work, keep=cpg.RUNS)
    assert (copy / cpg.RUNS / "task0" / "checkpoint-3.pth.tar").read_text() == "weights"
    assert (copy / "main.py").read_text() == "print(1)\n"  # the rest afresh
    assert not (common.patched_copy(ref, pinned, [], work) / cpg.RUNS).exists()
    from parity import cgate
    base = ["x.py", "--ref", str(ref), "--work", str(work), "--resume"]
    for module, extra, message in ((cpg, ["--diagnostic", next(iter(cpg.DIAGNOSTICS))], "not a diagnostic's"),
                                   (cgate, [], "the cgate runner cannot resume a reference run")):
        monkeypatch.setattr(sys, "argv", [*base, *extra])
        with pytest.raises(SystemExit, match=message):
            common.main(module)
    assert not work.joinpath("cpg").exists() and not work.joinpath("cgate").exists()


def test_a_resumed_reference_side_keeps_the_written_split_and_resumes(tmp_path):
    """common.reference_side with --resume: the split the cut-short run wrote stays (goals.json, written last, says
    it is whole) and the runner is told to resume."""
    data = tmp_path / "work" / "data" / "cpg_learn" / "seed1"
    data.mkdir(parents=True)
    (data / "goals.json").write_text('{"task0": "0.9530"}')
    calls = []
    module = SimpleNamespace(ROWS=cpg.ROWS, run_reference=lambda *args, **kwargs: calls.append(kwargs) or
                             common.Outcome(0.5, [[0.5]]), write_tasks=lambda *args: calls.append("written"))
    args = SimpleNamespace(resume=True, data_root=str(tmp_path), python="python")
    outcome, _, _ = common.reference_side(module, tmp_path / "ref", "cpg_learn", 1, tmp_path / "work", args)
    assert calls == [{"resume": True}] and outcome.ra == 0.5
    assert (data / "goals.json").read_text() == '{"task0": "0.9530"}'


@pytest.mark.slow  # whole cl-bench runs
def test_a_clbench_side_cut_short_resumes_from_its_last_checkpoint(tmp_path):
    """--resume on cl-bench's side: a run cut short after its second task goes on from that task's checkpoint
    (`cl-bench train resume=DIR`) to the outcome of a run never cut, its seconds counting the checkpoint's; without
    --resume the folder is started afresh."""
    row = common.Row("finetune", "digits", ("method=finetune", "method.epochs=1", "checkpoint.keep=all"))
    whole_dir, cut_dir = tmp_path / "whole", tmp_path / "cut"
    whole = common.run_clbench(row, 0, whole_dir)
    assert whole.replayed == 0 and (whole_dir / "checkpoints" / "last").is_file()  # checkpointed by default
    shutil.copytree(whole_dir, cut_dir)  # the same run, which the cut below leaves with its first two tasks
    for later in (cut_dir / "checkpoints").glob("task_*"):  # cut short after task 1: tasks 2-4 never ran
        if later.name > "task_001":
            shutil.rmtree(later)
    (cut_dir / "checkpoints" / "last").write_text("task_001")
    (cut_dir / "metrics.json").unlink()
    spent = json.loads((cut_dir / "checkpoints" / "task_001" / "meta.json").read_text())["elapsed_s"]
    resumed = common.run_clbench(row, 0, cut_dir, resume=True)
    assert (resumed.ra, resumed.matrix) == (whole.ra, whole.matrix) and resumed.replayed == spent > 0
    starts = [json.loads(line)["task"] for line in (cut_dir / "events.jsonl").read_text().splitlines()
              if '"task_start"' in line]
    assert starts == [0, 1, 2, 3, 4, 2, 3, 4]  # resumed, not rerun
    again = common.run_clbench(row, 0, cut_dir)  # no --resume: a fresh run in an emptied folder
    assert again.replayed == 0 and again.ra == whole.ra
    assert [json.loads(line)["task"] for line in (cut_dir / "events.jsonl").read_text().splitlines()
            if '"task_start"' in line] == [0, 1, 2, 3, 4]
