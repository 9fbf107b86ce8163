"""docs/api.md's examples, run as written: each ```python block in a fresh directory of its own."""
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_page_has_examples():
    assert len(BLOCKS) >= 4


# An example that calls api.run trains a whole run: marked slow, as `make test-fast` leaves them out
EXAMPLES = [pytest.param(i, marks=pytest.mark.slow if "api.run(" in block else ()) for i, block in enumerate(BLOCKS)]


@pytest.mark.parametrize("index", EXAMPLES)
def test_api_page_example_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_SILENT", "true")
    exec(compile(BLOCKS[index], f"docs/api.md example {index + 1}", "exec"), {"__name__": f"example{index}"})
