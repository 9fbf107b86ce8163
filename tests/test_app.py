"""`cl-bench train` as a Hydra application: shell completion, a user's own config folder with its run directory
set in a config file, and each run's train.log (a crashed sweep job's traceback included)."""
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT, cl_bench

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out


def completions(line: str) -> list[str]:
    """What the installed bash script gets back: it runs `cl-bench -sc query=bash` with the line in COMP_LINE."""
    env = {**os.environ, "COMP_LINE": line, "COMP_POINT": str(len(line))}
    proc = subprocess.run([sys.executable, "-m", "cl_bench", "-sc", "query=bash"], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_shell_completion_answers_for_cl_bench_train():
    assert completions("cl-bench train method=pack") == ["method=packnet"]
    assert {"method=finetune", "method=cpg"} <= set(completions("cl-bench train method="))
    assert "dataset.num_tasks=" in completions("cl-bench train dataset=split_mnist dataset.num")
    installed = cl_bench("train", "-sc", "install=bash")
    assert installed.returncode == 0 and "complete -o nospace -o default -F hydra_bash_completion" in installed.stdout


def test_a_users_config_folder_adds_a_preset_that_sets_its_run_directory(tmp_path):
    (tmp_path / "myconf" / "experiment").mkdir(parents=True)
    (tmp_path / "myconf" / "experiment" / "quick_ewc.yaml").write_text(textwrap.dedent(f"""\
        # @package _global_
        defaults:
          - override /method: ewc
        method:
          epochs: 1
        dataset:
          num_tasks: 2
        hydra:
          run:
            dir: {tmp_path}/from_config
        """))
    proc = cl_bench("train", f"hydra.searchpath=[file://{tmp_path}/myconf]", "experiment=quick_ewc", "logger=none")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "from_config" / "metrics.json").is_file()
    log = (tmp_path / "from_config" / "train.log").read_text()
    assert "ewc on split_digits" in log and "task 1: acc" in log


def test_a_crashed_sweep_job_leaves_its_traceback_in_its_train_log(tmp_path):
    """Job 1 fails on purpose (its task loop raises); Hydra stops the sweep, and the job's own log keeps why."""
    sweep = tmp_path / "sweep"
    script = textwrap.dedent(f"""
        import sys
        from cl_bench import cli, train
        learn = train.run
        def run(cfg, run_dir, *rest):
            if cfg.seed == 1:
                raise RuntimeError("failing on purpose")
            return learn(cfg, run_dir, *rest)
        train.run = run
        sys.exit(cli.main(["train", "-m", "seed=0,1", "method.epochs=1", "dataset.num_tasks=2", "logger=none",
                           "hydra.sweep.dir={sweep}"]))
        """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, text=True, capture_output=True, timeout=600)
    assert proc.returncode != 0 and "failing on purpose" in proc.stderr
    assert "Traceback" not in (sweep / "0" / "train.log").read_text()
    log = (sweep / "1" / "train.log").read_text()
    assert "the run failed" in log and "Traceback (most recent call last)" in log
    assert "RuntimeError: failing on purpose" in log


def without(module: str, *argv: str) -> subprocess.CompletedProcess:
    """cl-bench as if `module` (an optional extra's package) were not installed."""
    script = f"import sys; sys.modules[{module!r}] = None; from cl_bench import cli; sys.exit(cli.main({list(argv)!r}))"
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, text=True, capture_output=True, timeout=300)


def test_a_missing_extra_is_one_line_naming_it(tmp_path):
    proc = without("wandb", "train", "logger=wandb", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "cl-bench: error: logger=wandb: install the wandb extra (pip install 'cl-bench[wandb]')")
    assert not (tmp_path / "run").exists()  # report without matplotlib: tests/test_report_settings.py


def test_a_choice_yaml_reads_as_another_type_is_one_line(tmp_path):
    """method=true: YAML reads a boolean, and Hydra refuses it with a bare ValueError; said as any unknown choice."""
    proc = cl_bench("train", "method=true", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("cl-bench: error: unknown method 'true': choose one of agem, ")
    assert not (tmp_path / "run").exists()


def test_cfg_job_on_a_terminal_is_a_tree_of_the_groups(monkeypatch):
    import io

    from rich.console import Console

    from cl_bench import app, config, console
    config.register()  # the schemas, as `cl-bench train` registers them first
    screen = io.StringIO()
    monkeypatch.setattr(console, "rich_console", lambda: Console(file=screen, force_terminal=True, width=100,
                                                                  color_system=None))
    assert app.print_config_tree(["method=er", "method.memory_size=300"]) == 0
    lines = screen.getvalue().splitlines()
    assert lines[0] == "config" and any(line.startswith("├── method") for line in lines)
    branches = [line.split("── ")[1] for line in lines if line.startswith(("├── ", "└── "))]
    assert branches[-1] == "run" and {"method", "dataset", "backbone", "data", "checkpoint"} <= set(branches)
    method = lines[lines.index("├── method") + 1:]
    assert any("memory_size: 300" in line for line in method[:40])
    run = lines[lines.index("└── run") + 1:]
    assert any("seed: " in line for line in run) and not any("memory_size" in line for line in run)
