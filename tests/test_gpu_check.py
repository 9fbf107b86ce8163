"""scripts/gpu_check.sh, the GPU check: its CPU rehearsal (--cpu, two paper settings at tiny sizes, the jobs side by
side and the precision rows), its refusal of a machine without CUDA, and the parts that only a GPU exercises
whole (the step window around epoch ends, the busy fraction's arithmetic, what gets flagged)."""
import json
import os
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402


@pytest.mark.slow  # whole processes: `make test-fast` leaves it out
def test_the_cpu_rehearsal_times_a_settings_phases_graphs_jobs_side_by_side_and_precision(tmp_path):
    out = tmp_path / "check"
    # PYTHON: the suite's own interpreter, which has every dependency
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", "--cpu", "--only", "nccl,finetune", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "gpu_check.json").read_text())
    assert list(result["settings"]) == ["nccl split_cifar100"] and result["flagged"] == []
    row = result["settings"]["nccl split_cifar100"]
    # each phase of the first two tasks: the second's steps replay and take NCCL's outer step
    assert list(row["phases"]) == list(gpu_check.PHASES["nccl split_cifar100"]) and "missing" not in row
    for phase in row["phases"].values():
        assert phase["step_ms"] > 0 and phase["plain_step_ms"] > 0 and phase["batch"] == 8
        assert phase["syncs"] is None and phase["gpu_busy"] is None  # the device's counts: none on the CPU
    graphs = result["graphs"]
    assert list(graphs) == ["finetune split_cifar10", "default job", "derpp job"]
    assert all(graphs["finetune split_cifar10"][mode]["step_ms"] > 0 for mode in ("eager", "graphed"))
    # without CUDA the captured path runs its steps eagerly: the same weights, bit for bit
    assert all(graphs[job]["graphed_diff"] == 0 and graphs[job]["cuda_graphs"].startswith(
        "not captured: no CUDA device") for job in ("default job", "derpp job"))
    assert result["jobs_setting"] == "nccl split_cifar100" and list(result["jobs"]) == ["1", "2"]
    assert all(row["samples_per_s"] > 0 for row in result["jobs"].values())
    digits = result["digits"]
    assert list(digits) == ["cpu fp32", "cpu bf16"]  # on the CPU the device's fp32 row is the reference itself
    assert digits["cpu fp32"]["precision"] == "fp32" and digits["cpu bf16"]["precision"] == "bf16"
    assert list(digits["cpu bf16"]["by_seed"]) == ["0", "1"] and digits["cpu bf16"]["versus"]["test"] == "paired"
    assert digits["cpu bf16"]["versus"]["verdict"] != "different"
    table = (out / "gpu_check.md").read_text()
    assert "| nccl split_cifar100 | task1 train | 8 |" in table and "| 2 |" in table and "Flagged: nothing" in table
    assert "| finetune split_cifar10 |" in table and "largest weight difference 0.00e+00" in table


def test_the_window_times_each_phase_of_a_run_by_task_and_name():
    """Each fit() phase, named by its task and Loop.phase_name, gets its own warm-up, timed and profiled steps; a
    phase too short for them leaves no row, a phase of a name already timed runs untimed, and a phase missing from
    the setting's PHASES is flagged."""
    loop = SimpleNamespace(phase_name="goal")
    window = gpu_check.Window(torch.device("cpu"), {"warmup": 1, "steps": 2, "profiled": 1},
                              method=SimpleNamespace(loop=loop))
    window.task_start(SimpleNamespace(id=0))

    def phase(name: str, steps: int) -> None:
        loop.phase_name = name
        window.epoch_start(0, 0, 1, steps)
        for _ in range(steps):
            window.step()
    phase("goal", 5)  # 1 + warm-up 1 + timed 2 + profiled 1
    phase("train", 3)  # too short: no row
    phase("goal", 5)  # timed already: runs untimed
    window.task_start(SimpleNamespace(id=1))
    phase("refit", 6)
    assert list(window.rows) == ["task0 goal", "task1 refit"] and window.phase == "done"
    assert all(row["step_ms"] > 0 and row["gpu_busy"] is None for row in window.rows.values())
    settings = {"cpg cifar100_20": {"step_ms": 1.0, "phases": {"task0 goal": {"step_ms": 1.0}},
                                    "missing": ["task0 train"]}}
    assert gpu_check.flagged({"settings": settings}) == ["cpg cifar100_20: phases not run: task0 train"]


def test_the_two_calls_cover_every_setting_and_section_once():
    """Every section runs, and every label of the settings and graphs sections runs once, in a call that runs its
    section (a graphs label in a call without the graphs section would never run)."""
    sections = [s for sections, *_ in gpu_check.CALLS.values() for s in sections]
    assert sorted(set(sections)) == sorted(gpu_check.SECTIONS) and sections.count("settings") == 2
    for section, table, where in (("settings", gpu_check.SETTINGS, 1), ("graphs", gpu_check.GRAPHS, 2)):
        ran = [label for call in gpu_check.CALLS.values() if section in call[0] for label in call[where]]
        idle = [label for call in gpu_check.CALLS.values() if section not in call[0] for label in call[where]]
        assert sorted(ran) == sorted(table) and idle == [], section


NO_DEVICE = not any(os.path.exists(d) for d in ("/dev/nvidia0", "/dev/dxg")) and not shutil.which("nvidia-smi")


def refused(tmp_path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", "--out", str(tmp_path / "check")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("gpu_check: CUDA is not usable here (")
    assert "--cpu" in proc.stderr
    assert list(tmp_path.iterdir()) == []
    return proc


@pytest.mark.skipif(not NO_DEVICE, reason="an NVIDIA device here: the first gate lets the script on")
def test_a_machine_without_an_nvidia_device_is_refused_before_any_python_starts(tmp_path):
    start = time.monotonic()
    proc = refused(tmp_path, {"PYTHON": "/nonexistent/python"})  # never started: the gate comes first
    assert time.monotonic() - start < 5
    assert "no NVIDIA device: no /dev/nvidia0, /dev/dxg or nvidia-smi" in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a usable GPU: the script would run the whole check")
def test_a_device_torch_cannot_use_is_refused_in_torchs_words(tmp_path):
    """Past the first gate (here an nvidia-smi that lists a device), torch's probe refuses: a driver or device
    visible to the system that torch cannot use."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: a device torch cannot use'\n")
    (fake / "nvidia-smi").chmod(0o755)
    check = tmp_path / "out"
    check.mkdir()
    proc = refused(check, {"PATH": f"{fake}:{os.environ['PATH']}", "PYTHON": sys.executable})
    assert "torch.cuda.is_available() is False" in proc.stderr and sys.executable in proc.stderr


def test_an_unknown_argument_or_setting_is_refused_in_one_line(tmp_path):
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", "--cpus"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unknown argument --cpus" in proc.stderr
    proc = subprocess.run([sys.executable, "scripts/gpu_check.py", "--cpu", "--only", "hat", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "--only hat names no setting" in proc.stderr and list(tmp_path.iterdir()) == []


def test_the_window_times_whole_steps_within_one_epoch():
    """Warm-up 1, 2 timed, 1 profiled: an epoch's end inside the timed run starts it again at the next whole step,
    and the probe stops the run once every count is met."""
    window = gpu_check.Window(torch.device("cpu"), {"warmup": 1, "steps": 2, "profiled": 1}, first_only=True)
    window.epoch_start()
    window.step()  # the epoch's first step ended: from here steps are whole
    window.step()  # the warm-up step: timing begins
    assert window.phase == "timing"
    window.step()  # one timed step
    window.epoch_start()  # ...and an epoch's end: that run of timed steps is dropped
    assert window.caught is None and "step_ms" not in window.result
    window.step()  # the new epoch's first step: timing begins again
    window.step()
    window.step()  # two whole timed steps
    assert window.phase == "profiling" and window.result["step_ms"] > 0 and window.result["syncs"] is None
    with pytest.raises(gpu_check.Enough):
        window.step()
    assert window.result["gpu_busy"] is None


def test_the_busy_fraction_is_the_union_of_kernel_intervals_over_the_wall():
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    def event(device, start, end):
        return SimpleNamespace(device_type=device, time_range=SimpleNamespace(start=start, end=end))
    prof = SimpleNamespace(events=lambda: [event(cuda, 0, 10), event(cuda, 5, 20), event(cpu, 0, 100),
                                           event(cuda, 50, 60), event(cuda, 52, 55)])
    assert gpu_check.busy_fraction(prof, wall_us=100) == pytest.approx(0.30)  # [0, 20] and [50, 60]


def test_failed_rows_and_a_device_that_disagrees_with_the_cpu_are_flagged():
    nan = {"phases": {"task0 train": {"step_ms": float("nan")}}}
    result = {"settings": {"a": {"failed": "RuntimeError: x"}, "b": nan},
              "graphs": {"c": {"failed": "RuntimeError: y"}, "default job": {"disagrees": "differ"}},
              "jobs": {"4": {"samples_per_s": 1.0}},
              "digits": {"cpu fp32": {"avg_acc": 0.9}, "gpu bf16": {"avg_acc": 0.8, "disagrees": "different"}}}
    assert gpu_check.flagged(result) == ["a: RuntimeError: x", "c: RuntimeError: y", "gpu bf16: different",
                                         "default job: differ", "b task0 train: non-finite step time"]


def test_precision_is_judged_paired_on_the_device_and_the_device_unpaired_against_the_cpu(tmp_path, monkeypatch):
    """Final accuracies by run (points): the GPU's fp32 and bf16 runs of a seed share its random stream, the CPU's
    do not. One seed's 5.8-point gap between a GPU and the CPU (the first lease's seed 0) is no verdict at all beside
    the CPU's own seed spread; bf16 a steady 4 points below fp32, seed by seed, is different."""
    accuracy = {("cpu", "fp32"): [91.38, 97.49, 98.33], ("gpu", "fp32"): [97.21, 96.0, 98.9],
                ("gpu", "bf16"): [93.2, 92.1, 94.8]}

    def runs(overrides, seeds, folder):
        device = "cpu" if "hardware=cpu" in overrides else "gpu"
        precision = "bf16" if "hardware.precision=bf16" in overrides else "fp32"
        return {seed: {"avg_acc": accuracy[device, precision][seed] / 100, "precision": precision, "time_s": 1.0}
                for seed in seeds}
    monkeypatch.setattr(gpu_check, "digits_runs", runs)
    rows = gpu_check.digits_section(cpu=False, work=tmp_path)
    assert list(rows) == ["cpu fp32", "gpu fp32", "gpu bf16"] and "versus" not in rows["cpu fp32"]
    fp32, bf16 = rows["gpu fp32"]["versus"], rows["gpu bf16"]["versus"]
    assert (fp32["row"], fp32["test"], fp32["verdict"]) == ("cpu fp32", "welch", "undetermined")
    assert (bf16["row"], bf16["test"], bf16["verdict"]) == ("gpu fp32", "paired", "different")
    assert bf16["points"] == pytest.approx((-4.01 - 3.9 - 4.1) / 3)
    assert gpu_check.flagged({"digits": rows}) == ["gpu bf16: different from gpu fp32 at +-2.0 points (paired)"]
    table = gpu_check.render({"device": "d", "date": "x", "commit": "c", "torch": "t", "cpu": False, "seconds": 1,
                              "sizes": gpu_check.SIZES["gpu"], "digits": rows, "flagged": []})
    assert "| gpu bf16 | bf16 | 93.20 / 92.10 / 94.80 | 93.37 | gpu fp32 (paired) | -4.00 [" in table


PAE = ["method.picking=false", "method.max_multiplier=2.0"]  # pae_cifar100_20's own


@pytest.mark.parametrize(("label", "variant"), [("cpg cifar100_20", []), ("pae cifar100_20", PAE)])
def test_cpgs_cut_runs_every_phase_of_both_tasks_whatever_the_accuracies(label, variant):
    """CUT's unmeetable goal and zero bar: task 0 grows and releases weights, so task 1 has its own to prune (and,
    with picking, to refit). On the embedded digits with an MLP, the rehearsal's batches and ramp."""
    from cl_bench import api, train
    from cl_bench.recorders import Recorders
    cfg = api.compose("method=cpg", "dataset=split_digits", "dataset.samples_per_task=40", "method.batch_size=8",
                      "hardware=cpu", "logger=none", "checkpoint.enabled=false", "seed=0", *variant,
                      *gpu_check.CUT["cpg"], *gpu_check.SIZES["cpu"]["cut"]["cpg"])
    scenario, method, ctx = train.build(cfg, Recorders([]))
    window = gpu_check.Window(ctx.device, {"warmup": 1, "steps": 1, "profiled": 1}, method=method)
    ctx.recorder = Recorders([window])
    for task in scenario.tasks[:gpu_check.TASKS]:
        window.task_start(task)
        method.learn(task)
    assert list(window.rows) == list(gpu_check.PHASES[label])
