"""The real CLI end to end on the embedded digits: finetune and joint bounding each other, the default run, and the
user errors that must fail in one line. Each baseline's own run in each scenario it supports is its trial
(test_method_contract.py), which keeps the run directory contract; here its first task is held to learning well."""
import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, cl_bench, contract_problems, once_per_session, train
from test_method_contract import trial

from cl_bench import methods

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

BASELINES = ["finetune", "joint", "independent", "ewc", "lwf", "er"]
CASES = [(m, s) for m in BASELINES for s in ("task", "class") if s in methods.METHODS[m].traits.scenarios]


@pytest.mark.parametrize(("method", "scenario"), CASES)
def test_each_baselines_trial_learns_its_first_task_well(tmp_path_factory, worker_id, method, scenario):
    m = trial(tmp_path_factory, worker_id, method, scenario)["metrics"]
    assert m["tasks"][0]["classes"] == list(range(10 // m["num_tasks"]))  # the digits in order, five a task here
    assert m["acc"][0][0] > 0.9  # five digit classes after an epoch (two where the steps capture): far above chance
    assert m["capacity"]["params_total"] > 0


def class_run(tmp_path_factory, worker_id, method: str) -> tuple[Path, dict]:
    """The method's class-scenario run of two epochs a task through the CLI, run once in the session: its folder and
    metrics."""
    def compute(folder):
        return {"run_dir": str(folder / "run"),
                "metrics": train(folder / "run", f"method={method}", "scenario=class", "method.epochs=2")}
    run = once_per_session(tmp_path_factory, worker_id, f"cli-{method}-class", compute)
    return Path(run["run_dir"]), run["metrics"]


@pytest.mark.parametrize("method", ["finetune", "joint"])
def test_a_baseline_runs_through_the_cli(tmp_path_factory, worker_id, method):
    run_dir, m = class_run(tmp_path_factory, worker_id, method)
    assert contract_problems(run_dir) == []
    assert (m["method"], m["dataset"], m["scenario"], m["num_tasks"], m["complete"]) == (
        method, "split_digits", "class", 5, True)
    assert m["tasks"][0]["classes"] == [0, 1]
    assert m["acc"][0][0] > 0.9  # two digit classes after two epochs: far above chance
    assert m["capacity"]["params_total"] > 0


def test_independent_and_joint_bound_finetune_in_the_class_scenario(tmp_path_factory, worker_id):
    _, finetune = class_run(tmp_path_factory, worker_id, "finetune")
    _, joint = class_run(tmp_path_factory, worker_id, "joint")
    assert joint["avg_acc"] > finetune["avg_acc"] + 0.2  # finetune forgets old classes almost entirely
    assert finetune["forgetting"] > 0.5


def default_run_of(tmp_path_factory, worker_id) -> dict:
    """`cl-bench train method.epochs=1` as a user types it, run once in the session: its folder and output."""
    def compute(folder):
        proc = cl_bench("train", f"hydra.run.dir={folder / 'run'}", "method.epochs=1")
        return {"run_dir": str(folder / "run"), "code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    return once_per_session(tmp_path_factory, worker_id, "default_cli_run", compute)


@pytest.fixture
def default_run(tmp_path_factory, worker_id) -> dict:
    return default_run_of(tmp_path_factory, worker_id)


def test_default_run_prints_the_matrix_and_the_run_directory(default_run):
    run_dir = Path(default_run["run_dir"])
    assert default_run["code"] == 0, default_run["stderr"]
    out = default_run["stdout"] + default_run["stderr"]
    assert "avg_acc" in out and "forgetting" in out and "bwt" in out
    assert str(run_dir) in out.replace("\n", "")
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert json.loads((run_dir / "metrics.json").read_text())["complete"]


def test_list_names_methods_with_scenarios_datasets_and_backbones():
    proc = cl_bench("list")
    assert proc.returncode == 0
    for name in [*BASELINES, "split_digits", "cifar100_20", "permuted_mnist", "vgg16_bn", "resnet18_reduced"]:
        assert name in proc.stdout
    assert "task" in proc.stdout.split("independent")[1].splitlines()[0]
    # the scenarios hardware=ddp runs in (each method's distributed_scenarios, which tests/test_ddp.py holds the
    # agreement runs to): gated in both, CPG in the task scenario, the online methods in none
    methods_table, why_not = proc.stdout.split("datasets")[0].split("cuda_graphs: why not")
    cells = [[cell.strip() for cell in line.split("│")] for line in methods_table.splitlines() if "│" in line]
    rows = {row[0]: row[1:4] for row in cells if row[0] in ("gated", "cpg", "nccl", "ewc")}
    assert rows["gated"] == ["class,task", "class,task", "yes"] and rows["cpg"] == ["task", "task", "goal"]
    assert rows["nccl"] == ["class,task", "-", "-"]
    assert rows["ewc"][2] == "yes"  # hardware.cuda_graphs captures the steps of methods that declare them safe
    # under the methods, each one whose steps are not all captured, with the reason its Traits give (a long one
    # wraps onto lines of its own, their name cell empty)
    why, name = {}, None
    for line in why_not.splitlines():
        if "│" in line:
            cell, reason = (part.strip() for part in line.split("│"))
            name = cell or name
            why[name] = f"{why.get(name, '')} {reason}".strip()
    not_safe = {m: cls.traits.graph_safe for m, cls in methods.METHODS.items() if cls.traits.graph_safe is not True}
    assert {"lamaml", "nccl", "agem", "gdumb", "hat", "piggyback", "cpg"} <= set(not_safe) and why == not_safe


@pytest.mark.parametrize(("overrides", "says"), [
    (["method=nope"], "unknown method 'nope'"),
    (["dataset=nope"], "unknown dataset 'nope'"),
    (["method.lr_msk=1e-3"], "unknown key 'method.lr_msk'"),
    (["+method.lr_msk=1e-3"], "unknown key 'method.lr_msk'"),
    (["method.lr=fast"], "could not be converted to Float"),
    (["method.lr=-0.1"], "method.lr=-0.1 is out of range"),
    (["method.batch_size=0"], "method.batch_size=0 is out of range"),
    (["data.val_fraction=1.5"], "data.val_fraction=1.5 is out of range"),
    (["scenario=domain"], "Invalid value 'domain', expected one of [task, class]"),
    (["method=independent", "scenario=class"], "method=independent does not support scenario=class"),
    (["method=er", "method.memory_size=0"], "method.memory_size=0 is out of range"),
    (["dataset=split_mnist", "data.root=/nonexistent"], "data.download=true"),
])
def test_user_errors_are_one_line_without_traceback(tmp_path, overrides, says):
    run_dir = tmp_path / "run"
    proc = cl_bench("train", f"hydra.run.dir={run_dir}", *overrides)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("cl-bench: error:") and says in lines[0], lines[0]
    assert not (run_dir / "metrics.json").exists()


def test_a_finished_run_directory_is_never_overwritten(default_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(default_run["run_dir"], run_dir)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    proc = cl_bench("train", f"hydra.run.dir={run_dir}", "method.epochs=1")
    assert proc.returncode == 2 and f"resume={run_dir}" in proc.stderr and "Traceback" not in proc.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_unknown_command_is_a_clear_error():
    proc = cl_bench("trian")
    assert proc.returncode == 2 and "unknown command 'trian'" in proc.stderr and "Traceback" not in proc.stderr


def test_the_package_uses_no_private_hydra_or_interpreter_api():
    """Hydra's public API and a plain exit: no hydra._internal, no private exit path."""
    private = ("hydra._internal", "os._exit", "atexit._run_exitfuncs", "threading._shutdown", "sys._getframe")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in sorted((ROOT / "cl_bench").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if any(p in line for p in private)]
    assert found == []


def test_cfg_job_prints_the_checked_config_as_yaml_into_a_pipe_and_help_lists_no_schemas():
    import yaml
    proc = cl_bench("train", "method=er", "method.memory_size=300", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    printed = yaml.safe_load(proc.stdout)  # Hydra's convention: YAML a user can save and reuse
    assert printed["method"]["memory_size"] == 300 and printed["dataset"]["name"] == "split_digits"
    assert "├──" not in proc.stdout
    bad = cl_bench("train", "method.memory_size=0", "method=er", "--cfg", "job")
    assert bad.returncode != 0 and "method.memory_size=0 is out of range" in bad.stderr
    help_text = cl_bench("train", "--help").stdout
    assert "debug: fast, profile" in help_text and "schema" not in help_text
