"""REPRODUCING.md's tables are made from the records under docs/repro (scripts/repro_records.py), never typed."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import repro_records  # noqa: E402


def test_every_table_regenerates_from_its_records():
    done = subprocess.run([sys.executable, "scripts/repro_records.py", "render", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_table_names_records_that_exist():
    blocks = [m.group("args").split() for m in repro_records.BLOCK.finditer(repro_records.DOCUMENT.read_text())]
    assert blocks, "REPRODUCING.md has no generated table"
    for tool, name, *_ in blocks:
        assert tool in repro_records.TOOLS
        assert any((repro_records.RECORDS / name).rglob("metrics.json")), name


def test_keep_takes_complete_runs_and_their_small_files_only(tmp_path):
    sweep = tmp_path / "sweep"
    source = next(repro_records.RECORDS.rglob("metrics.json")).parent
    for job, complete in (("0", True), ("1", False)):
        run = sweep / job
        (run / ".hydra").mkdir(parents=True)
        for part in repro_records.KEPT:
            (run / part).write_bytes((source / part).read_bytes())
        (run / "checkpoints").mkdir()
        (run / "train.log").write_text("log")
        metrics = json.loads((run / "metrics.json").read_text())
        (run / "metrics.json").write_text(json.dumps({**metrics, "complete": complete}))
    assert repro_records.keep(sweep, tmp_path / "kept") == 1
    kept = sorted(str(p.relative_to(tmp_path / "kept")) for p in (tmp_path / "kept").rglob("*") if p.is_file())
    assert kept == sorted(f"0/{part}" for part in repro_records.KEPT)


def test_a_table_of_an_unknown_tool_is_refused():
    with pytest.raises(SystemExit, match="tool is one of"):
        repro_records.table("plot smoke")


@pytest.mark.parametrize("figures", ["", "absent.yaml", "der_paper.yaml der_paper.yaml"])
def test_a_paper_table_without_one_figures_file_is_refused(figures):
    with pytest.raises(SystemExit, match="one figures file"):
        repro_records.table(f"paper smoke {figures}")


def test_a_paper_table_sets_each_settings_ra_beside_its_published_figure(tmp_path):
    source = next((repro_records.RECORDS / "baselines_split_mnist").rglob("metrics.json")).parent
    base = json.loads((source / "metrics.json").read_text())

    def record(job: int, **metrics) -> None:  # a kept run: a real record's config, its metrics changed
        run = tmp_path / "records" / str(job)
        (run / ".hydra").mkdir(parents=True)
        for part in ("config.yaml", "overrides.yaml"):
            (run / ".hydra" / part).write_text((source / ".hydra" / part).read_text())
        (run / "metrics.json").write_text(json.dumps({**base, **metrics}))

    for job, (method, seed, ra) in enumerate([("er", 0, 0.80), ("er", 1, 0.82), ("ewc", 0, 0.20)]):
        record(job, method=method, seed=seed, avg_acc=ra,
               capacity={**base["capacity"], "memory_size": 200 if method == "er" else None})
    (tmp_path / "paper.yaml").write_text("split_mnist:\n  er: {200: 80.43, 500: 86.12}\n")
    lines = repro_records.versus_paper(tmp_path / "records", tmp_path / "paper.yaml").splitlines()
    # er: 80 and 82 -> 81.00 ± 1.41, two seeds (no interval); 81.00 - 80.43 = +0.57; ewc has no figure
    assert lines[2] == "| split_mnist | class | er | 200 | 2 | 81.00 ± 1.41 | 80.43 | +0.57 |"
    assert lines[3] == "| split_mnist | class | ewc | – | 1 | 20.00 ± 0.00 | – | – |"
    # a run of er at 200 on another backbone: report would show the column; this table cannot, so it refuses
    record(3, **{**json.loads((tmp_path / "records" / "0" / "metrics.json").read_text()), "backbone": "resnet18"})
    with pytest.raises(SystemExit, match="does not show"):
        repro_records.versus_paper(tmp_path / "records", tmp_path / "paper.yaml")
