"""Every `cl-bench train` a reproduction target runs composes and validates: a misspelt override in the Makefile
fails here, in seconds, not an hour into `make repro-*`."""
import itertools
import re
import shlex
import shutil
import subprocess

import pytest
from conftest import ROOT

from cl_bench import config

TARGETS = ("repro-baselines", "repro-cpg", "repro-gated", "repro-nccl", "repro-smoke")


def sweep_values(value: str) -> list[str]:
    """Hydra's comma sweep, split at the commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in value:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [*parts, current]


def jobs(line: str) -> list[list[str]]:
    """The overrides of each job of one `cl-bench train -m ...` line."""
    words = [w for w in shlex.split(line.split("cl-bench train", 1)[1]) if w != "-m"]
    words = [w for w in words if not w.startswith("hydra.")]
    choices = [[f"{w.split('=', 1)[0]}={v}" for v in sweep_values(w.split("=", 1)[1])] for w in words]
    return [list(combo) for combo in itertools.product(*choices)]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_every_reproduction_job_composes_and_validates():
    dry = subprocess.run(["make", "-n", *TARGETS, "SEEDS=0", "VENV_STAMP="], cwd=ROOT, text=True,
                         capture_output=True, check=True).stdout
    lines = [line for line in re.sub(r"\\\n", " ", dry).splitlines() if "cl-bench train" in line]
    assert len(lines) > 40
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
