"""Every `cl-bench train` a reproduction target runs composes and validates: a misspelt override in the Makefile
fails here, in seconds, not an hour into `make repro-*`."""
import re
import shlex
import shutil
import subprocess

import pytest
from conftest import ROOT
from omegaconf import OmegaConf

from cl_bench import app, config

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

TARGETS = ("repro-baselines", "repro-cpg", "repro-gated", "repro-gated-cpu", "repro-gated-ladder", "repro-nccl",
           "repro-nccl-calibration", "repro-smoke")


def grid_params(word: str) -> list[str]:
    """The sweep a `grid=NAME` option declares (hydra.sweeper.params), as key=a,b words."""
    if not word.startswith("grid="):
        return []
    params = OmegaConf.load(config.CONF / "grid" / f"{word.split('=', 1)[1]}.yaml").hydra.sweeper.params
    return [f"{key}={value}" for key, value in params.items()]


def jobs(line: str) -> list[list[str]]:
    """The overrides of each job of one `cl-bench train -m ...` line, with the sweeps its grid= declares, expanded
    as `cl-bench train` itself expands them before the first job (app.sweep_jobs)."""
    words = [w for w in shlex.split(line.split("cl-bench train", 1)[1]) if w != "-m"]
    words = [w for w in words if not w.startswith("hydra.")]
    expanded = app.sweep_jobs([*words, *(p for w in words for p in grid_params(w))])
    assert expanded, f"{line}: more jobs than app.MAX_CHECKED_JOBS, or a sweep it cannot expand"
    return expanded


def reproduction_lines() -> list[str]:
    dry = subprocess.run(["make", "-n", *TARGETS, "SEEDS=0", "VENV_STAMP="], cwd=ROOT, text=True,
                         capture_output=True, check=True).stdout
    return [line for line in re.sub(r"\\\n", " ", dry).splitlines() if "cl-bench train" in line]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_every_reproduction_job_composes_and_validates():
    lines = reproduction_lines()
    assert len(lines) > 30
    config.register()
    checked = 0
    for line in lines:
        for overrides in jobs(line):
            try:
                config.validate(config.compose(overrides))
            except config.UserError as e:
                pytest.fail(f"{' '.join(overrides)}: {e}")
            checked += 1
    assert checked > len(lines)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_no_reproduction_target_sets_a_hyperparameter():
    """The paper settings live in conf/setting/ (and the grids in conf/grid/): a target lists pairs and seeds."""
    for line in reproduction_lines():
        assert not re.search(r"\bmethod\.\w+=", line), line
        assert not re.search(r"\b(backbone|dataset)\.(?!samples_per_task|test_samples_per_task)\w+=", line), line
