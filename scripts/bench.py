"""Benchmarks as whole processes, with ratios taken within one run (CPU figures are noisy: compare ratios).

    python scripts/bench.py overhead [--repeats 3] [--data ../shared/data]   # cl-bench finetune vs plain PyTorch
    python scripts/bench.py methods  [--data ../shared/data]                 # each method's time over finetune's

Results are printed, written to docs/benchmarks.json (merged by section) and rendered into docs/benchmarks.md.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# The overhead workload of the performance issue: Split MNIST, class scenario, MLP 784-256-256, SGD 0.01/0.9,
# batch 128, one epoch per task, evaluation after each task; no validation hold-out, so both train on the same data.
WORKLOAD = ["method=finetune", "dataset=split_mnist", "backbone=mlp", "scenario=class",
            "backbone.hidden_sizes=[256,256]", "method.lr=0.01", "method.momentum=0.9", "method.batch_size=128",
            "method.epochs=1", "data.val_fraction=0", "logger=none", "checkpoint.enabled=false"]
ONLINE = ("nccl", "agem", "lamaml")
# The mask methods' extra phases (goal models, compacting, retraining) cut to one epoch each, so that the
# comparison is of one training pass; gated needs conv layers and is left out of the mlp comparison.
SHORT = {
    "cpg": ["method.goal_source=none", "method.prune_epochs=1", "method.prune_ramp_epochs=1",
            "method.prune_targets=[0.5,0.9]", "method.retrain_epochs=1"],
    "packnet": ["method.retrain_epochs=1"],
}
SKIP = {"gated": "needs a conv backbone"}


def timed(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - start, proc.stdout


def cl_bench(overrides: list[str], run_dir: Path) -> tuple[float, dict]:
    wall, _ = timed([sys.executable, "-m", "cl_bench", "train", *overrides, f"hydra.run.dir={run_dir}"])
    return wall, json.loads((run_dir / "metrics.json").read_text())


def overhead(data: str, repeats: int) -> dict:
    rows = {"cl-bench": [], "plain": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):  # interleaved, so drifting machine load hits both alike
            wall, m = cl_bench([*WORKLOAD, f"data.root={data}"], Path(tmp) / f"run{i}")
            rows["cl-bench"].append({"wall_s": wall, "train_eval_s": m["time_s"], "avg_acc": m["avg_acc"]})
            wall, out = timed([sys.executable, "scripts/plain_split_mnist.py", data])
            rows["plain"].append({"wall_s": wall, "train_eval_s": float(out.split()[1])})
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in rows.items()}
    return {"repeats": repeats, "median": med,
            "ratio_wall": med["cl-bench"]["wall_s"] / med["plain"]["wall_s"],
            "ratio_train_eval": med["cl-bench"]["train_eval_s"] / med["plain"]["train_eval_s"]}


def methods(data: str) -> dict:
    from cl_bench.methods import METHODS
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in ("task", "class"):
            for name, cls in sorted(METHODS.items()):
                if scenario not in cls.scenarios or name in SKIP:
                    continue
                args = [f"method={name}", f"scenario={scenario}", "dataset=split_mnist", "backbone=mlp",
                        f"data.root={data}", "logger=none", "checkpoint.enabled=false"]
                args += ["dataset.samples_per_task=1000"] if name in ONLINE else ["method.epochs=1"]
                args += SHORT.get(name, [])
                _, m = cl_bench(args, Path(tmp) / f"{name}_{scenario}")
                out[f"{name}/{scenario}"] = {"time_s": m["time_s"], "avg_acc": m["avg_acc"],
                                             "samples": 1000 if name in ONLINE else None}
    return out


def render(results: dict) -> str:
    lines = ["# Benchmarks", "", "Written by `python scripts/bench.py SECTION` on the machine named in each section; "
             "CPU figures are noisy, so compare the ratios taken within one run.", ""]
    if "overhead" in results:
        o = results["overhead"]
        med = o["median"]
        lines += ["## Overhead against plain PyTorch", "",
                  f"Median of {o['repeats']} whole-process runs each ({o['machine']}): "
                  f"`cl-bench train {' '.join(WORKLOAD)}` against `scripts/plain_split_mnist.py`.", "",
                  "| | whole process s | train+eval s | avg_acc |", "|---|---|---|---|",
                  f"| cl-bench | {med['cl-bench']['wall_s']:.2f} | {med['cl-bench']['train_eval_s']:.2f} | "
                  f"{med['cl-bench']['avg_acc']:.4f} |",
                  f"| plain PyTorch | {med['plain']['wall_s']:.2f} | {med['plain']['train_eval_s']:.2f} | |",
                  f"| ratio | {o['ratio_wall']:.2f}× | {o['ratio_train_eval']:.2f}× | |", ""]
    if "methods" in results:
        rows = results["methods"]["runs"]
        lines += ["## Method time over finetune", "", f"split_mnist, mlp 256-256, one epoch (online methods: one pass "
                  f"over 1,000 samples per task; cpg and packnet with their extra phases cut to one epoch; gated "
                  f"left out: {SKIP['gated']}), {results['methods']['machine']}.", "",
                  "| method / scenario | train+eval s | × finetune | avg_acc |", "|---|---|---|---|"]
        for key, r in rows.items():
            base = rows[f"finetune/{key.split('/')[1]}"]["time_s"]
            lines.append(f"| {key} | {r['time_s']:.2f} | {r['time_s'] / base:.2f} | {r['avg_acc']:.4f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("section", choices=["overhead", "methods"])
    parser.add_argument("--data", default="../shared/data", help="a data root holding MNIST/raw")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--machine", default="2-core CPU", help="words for the machine, recorded with the figures")
    opts = parser.parse_args()
    if not (Path(opts.data) / "MNIST" / "raw").is_dir() and not (ROOT / opts.data / "MNIST" / "raw").is_dir():
        sys.exit(f"bench: no MNIST under {opts.data}/MNIST/raw; pass --data")
    result = overhead(opts.data, opts.repeats) if opts.section == "overhead" else {"runs": methods(opts.data)}
    result["machine"] = opts.machine
    DOCS.mkdir(exist_ok=True)
    store = DOCS / "benchmarks.json"
    results = json.loads(store.read_text()) if store.exists() else {}
    results[opts.section] = result
    store.write_text(json.dumps(results, indent=1))
    (DOCS / "benchmarks.md").write_text(render(results))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
