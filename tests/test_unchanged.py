"""The redesign of issue 32 (heads, data-parallel training and the backbone contract out of methods/base.py, the
layering) changed no method's behaviour: a few methods, each on the embedded digits with a fixed seed, give the
accuracy matrices they gave at commit 7319750, before it (tests/data/metrics_before_redesign.json: `cl-bench train
OVERRIDES` run there with OMP_NUM_THREADS=1, as the suite runs; torch's thread count changes the order of float
sums). Accuracies may differ by one test sample at most: a CPU of another kind may round a logit differently."""
import json
from pathlib import Path

import pytest
from conftest import train

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

BEFORE = json.loads((Path(__file__).parent / "data" / "metrics_before_redesign.json").read_text())
ONE_SAMPLE = 1 / 70  # split_digits' smallest test split holds 71 images


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_metrics_are_those_before_the_redesign(name, tmp_path):
    before = BEFORE[name]
    now = train(tmp_path / name, *before["overrides"])
    for key in ("acc", "val_acc"):
        for row_now, row_before in zip(now[key], before[key], strict=True):
            assert row_now == pytest.approx(row_before, abs=ONE_SAMPLE), (name, key)
