"""Runs -> a paper-style table (mean ± std over seeds) and plots. Reads only run directories' files."""
import csv
import io
import json
import math
from collections import defaultdict
from pathlib import Path

from .console import rich_console
from .errors import UserError
from .files import write_text_atomic
from .recorders import task_end_capacities

GROUP = ("method", "dataset", "tasks", "scenario", "backbone", "memory", "protocol", "ran_on")  # official-protocol
# runs are never averaged with honest ones, nor 20 permutations with 100, nor one GPU's with two nodes
# metrics.json key -> its column, under the name the papers print (RA, BTI, LA: GEM, MER, La-MAML; task-aware:
# FACIL). A metric a run does not record (task-aware in the task scenario) is left out of its mean.
METRICS = {
    "avg_acc": "RA % (test avg_acc)",
    "val_avg_acc": "val RA %",
    "task_aware_avg_acc": "task-aware RA %",
    "bti": "BTI %",
    "la": "LA %",
    "forgetting": "forgetting %",
    "bwt": "bwt %",
}
COLUMNS = (*METRICS, "params", "in_use", "time_s")  # in_use: shared weights in use over the initial network's
# What a run's capacity says over tasks, plotted for any method that reports it (the mask methods do); a method's
# capacity is its own to declare, so the report names no method.
CAPACITY_CURVES = ("in_use_over_initial", "growth", "free_fraction")
TEST_SELECTION = "test_avg_acc"


def find_runs(paths: list[Path]) -> list[dict]:
    """Every run under the given run or sweep directories, as its metrics.json plus where it lives."""
    runs = []
    for path in paths:
        for metrics_file in sorted(Path(path).rglob("metrics.json")):
            run = json.loads(metrics_file.read_text())
            run["run_dir"] = str(metrics_file.parent)
            run["complete"] = run["complete"] and not (metrics_file.parent / "FAILED").is_file()  # failures.MARK
            run.setdefault("protocol", "honest")  # runs from before the official protocol existed
            # rehearsal runs of different memory sizes are different settings, never averaged together
            run["memory"] = (run.get("capacity") or {}).get("memory_size") or 0
            run["tasks"] = run.get("num_tasks") or len(run["acc"])
            run["ran_on"] = ran_on(run.get("ran_on"))
            if run.get("variant"):  # listed apart: cpg without picking is PAE
                run["method"] = f"{run['method']} ({run['variant']})"
            runs.append(run)
    return runs


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single run)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, std


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with df degrees of freedom (two-sided 95%)."""
    from scipy.stats import t  # scipy is a dependency (scikit-learn's, and SVHN's .mat reader)
    return float(t.ppf(0.975, df))


def ci95(std: float, n: int) -> float:
    """Half-width of the 95% confidence interval of a mean over n runs (Student's t); NaN for a single run."""
    return t_quantile_975(n - 1) * std / math.sqrt(n) if n > 1 else math.nan


def ran_on(where: dict | None) -> str:
    """metrics.json's ran_on in a cell: processes x device, and the nodes when more than one."""
    if not where:
        return "unrecorded"  # runs from before metrics.json said where they ran
    nodes = f" on {where['nodes']} nodes" if where["nodes"] > 1 else ""
    return f"{where['world_size']} x {where['device']}{nodes}"


def summarise(runs: list[dict]) -> list[dict]:
    """One row per method × dataset × scenario × backbone over complete runs, in a stable order."""
    groups = defaultdict(list)
    for run in runs:
        if run["complete"]:
            groups[tuple(run[k] for k in GROUP)].append(run)
    rows = []
    for key in sorted(groups):
        members = groups[key]
        row = dict(zip(GROUP, key))
        row["seeds"] = len(members)
        row["ra_by_seed"] = ra_by_seed(members)  # for --rank's paired differences; not a column
        row["objective"] = ",".join(sorted({r.get("objective", "unrecorded") for r in members}))
        row.update(health_of(members))
        for column in COLUMNS:
            values = [v for v in (_value(r, column) for r in members) if v is not None]
            mean, std = mean_std(values) if values else (math.nan, math.nan)
            row[column], row[f"{column}_std"], row[f"{column}_ci95"] = mean, std, ci95(std, len(values))
        rows.append(row)
    return rows


def health_of(runs: list[dict]) -> dict:
    """The health columns of a row: how many of its runs tripped a check (metrics.json's health; runs from before
    the checks count as unchecked) and which checks."""
    checked = [r for r in runs if "health" in r]
    tripped = [r for r in checked if r["health"]["tripped"]]
    names = sorted({f["check"] for r in tripped for f in r["health"]["findings"]})
    return {"health_checked": len(checked), "health_tripped": len(tripped), "health_checks": " ".join(names)}


def health_cell(row: dict, names: bool = True) -> str:
    """'ok', 'k/n tripped' (with the checks' names in report.md), or 'unchecked'."""
    if not row["health_checked"]:
        return "unchecked"
    if not row["health_tripped"]:
        return "ok" if row["health_checked"] == row["seeds"] else f"ok ({row['health_checked']}/{row['seeds']} checked)"
    text = f"{row['health_tripped']}/{row['seeds']} tripped"
    return f"{text}: {row['health_checks']}" if names else text


def health_lines(runs: list[dict]) -> list[str]:
    """Per run with tripped checks: its directory and each check with the tasks it tripped after."""
    lines = []
    for run in runs:
        tasks = defaultdict(list)
        for f in (run.get("health") or {}).get("findings", []):
            tasks[f["check"]].append(f["task"])
        if tasks:
            lines.append(f"- {run['run_dir']}: " + "; ".join(f"{c} after task {spans(t)}" for c, t in tasks.items()))
    return lines


def spans(numbers: list[int]) -> str:
    """Ascending numbers with their runs shortened: [0, 2, 3, 4, 7] -> '0, 2-4, 7'."""
    parts, start = [], 0
    for i in range(1, len(numbers) + 1):
        if i == len(numbers) or numbers[i] != numbers[i - 1] + 1:
            first, last = numbers[start], numbers[i - 1]
            parts.append(str(first) if first == last else f"{first}-{last}")
            start = i
    return ", ".join(parts)


def _value(run: dict, column: str) -> float | None:
    if column == "params":
        return run["capacity"].get("params_total", math.nan)
    if column == "in_use":  # the mask methods' figure (CPG's "1.09×")
        return run["capacity"].get("in_use_over_initial")
    return run.get(column)


def fmt(row: dict, column: str, interval: bool = True) -> str:
    mean, std, half = row[column], row[f"{column}_std"], row[f"{column}_ci95"]
    if math.isnan(mean):
        return "–"
    if column == "params":
        return f"{mean / 1e6:.3f}M"
    if column == "in_use":
        return f"{mean:.3f}×"
    scale, digits = (100, 2) if column in METRICS else (1, 1)
    text = f"{scale * mean:.{digits}f} ± {scale * std:.{digits}f}"
    if interval and not math.isnan(half):
        text += f" [{scale * (mean - half):.{digits}f}, {scale * (mean + half):.{digits}f}]"
    return text


def selection(row: dict) -> str:
    """What the row's runs returned to a sweeper, with test selection named as such."""
    return " ".join(f"{o} (TEST selection)" if o == TEST_SELECTION else o for o in row["objective"].split(","))


def headers() -> list[str]:
    return [*GROUP, "seeds", *METRICS.values(), "params", "weights in use", "time_s", "sweep objective", "health"]


def cells(row: dict) -> list[str]:
    return [*(group_cell(row, k) for k in GROUP), str(row["seeds"]), *(fmt(row, c) for c in COLUMNS), selection(row),
            health_cell(row)]


def group_cell(row: dict, key: str) -> str:
    if key == "memory":
        return str(row[key]) if row[key] else "–"
    return "official (selects on TEST)" if key == "protocol" and row[key] == "official" else str(row[key])


def optimised(paths: list[Path], runs: list[dict]) -> list[dict]:
    """The Optuna sweeps under paths (Hydra's optimization_results.yaml) with the objective their jobs returned."""
    import yaml
    found = []
    for path in paths:
        for results in sorted(Path(path).rglob("optimization_results.yaml")):
            best = yaml.safe_load(results.read_text()) or {}
            inside = [r for r in runs if Path(r["run_dir"]).is_relative_to(results.parent)]
            found.append({"sweep": str(results.parent), "trials": len(inside), "best_value": best.get("best_value"),
                          "best_params": best.get("best_params"),
                          "objective": ",".join(sorted({r.get("objective", "unrecorded") for r in inside}))})
    return found


def sweep_lines(sweeps: list[dict]) -> list[str]:
    lines = []
    for s in sweeps:
        warn = " (TEST selection: the chosen settings were picked on test data)" if TEST_SELECTION in s["objective"] \
            else ""
        lines.append(f"- {s['sweep']}: Optuna maximised {s['objective']}{warn} over {s['trials']} runs; "
                     f"best {s['best_value']} with {s['best_params']}")
    return lines


def write_tables(rows: list[dict], incomplete: list[dict], sweeps: list[dict], out: Path,
                 unhealthy: list[str] = ()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lines = ["Accuracies in %: mean ± sample std over runs [95% confidence interval, Student's t]. RA is the test "
             "average accuracy, BTI the mean over all tasks of final minus just-learned accuracy, LA the mean "
             "just-learned accuracy; val RA is on the validation splits that methods and sweeps select on.", ""]
    lines += ["| " + " | ".join(headers()) + " |", "|" + "---|" * len(headers())]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    if sweeps:
        lines += ["", "Sweeps that optimised an objective:", "", *sweep_lines(sweeps)]
    if unhealthy:
        lines += ["", f"{HEALTH_TITLE}:", "", *unhealthy]
    if incomplete:
        lines += ["", "Incomplete runs (not averaged):", ""]
        lines += [f"- {r['run_dir']}: {r['method']} on {r['dataset']}, {len(r['acc'])}/{r['num_tasks']} tasks"
                  for r in incomplete]
    write_text_atomic(out / "report.md", "\n".join(lines) + "\n")
    fields = [*GROUP, "seeds", *(f for c in COLUMNS for f in (c, f"{c}_std", f"{c}_ci95")), "objective",
              "health_checked", "health_tripped", "health_checks"]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=fields)
    writer.writeheader()
    writer.writerows({k: r[k] for k in fields} for r in rows)
    write_text_atomic(out / "report.csv", table.getvalue())


HEALTH_TITLE = "Runs whose health checks tripped (metrics.json's health; each run's train.log says how to fix it)"
WIDE = 400  # characters: room for every column of --wide
CONSOLE = ("avg_acc", "val_avg_acc", "task_aware_avg_acc", "bti", "la")  # the rest is in report.md


def print_table(rows: list[dict], incomplete: list[dict], sweeps: list[dict], out: Path, wide: bool = False,
                unhealthy: list[str] = ()) -> None:
    """The papers' figures, mean ± std, narrow enough for a terminal: the grouping columns whose value differs
    between rows (the others in the title) and CONSOLE's metrics that some row has; wide: every column of
    report.md, intervals aside. Confidence intervals and the rest are in report.md and report.csv."""
    from rich.console import Console
    from rich.table import Table
    varying = [k for k in GROUP if wide or k == "method" or len({group_cell(r, k) for r in rows}) > 1]
    shared = ", ".join(f"{k} {group_cell(rows[0], k)}" for k in GROUP if k not in varying and rows)
    metrics = COLUMNS if wide else [c for c in CONSOLE if any(not math.isnan(r[c]) for r in rows)]  # no empty ones
    table = Table(title="cl-bench report (accuracies in %, mean ± std over runs)" + (f"\n{shared}" if shared else ""))
    for column in [*varying, "n", *(METRICS.get(c, c).replace(" (test avg_acc)", "") for c in metrics), "health"]:
        table.add_column(column, justify="left" if column in (*GROUP, "health") else "right", no_wrap=True)
    for r in rows:
        table.add_row(*(group_cell(r, k) for k in varying), str(r["seeds"]),
                      *(fmt(r, c, interval=False) for c in metrics), health_cell(r, names=wide))
    console = Console(width=WIDE) if wide else rich_console()  # --wide: never squeezed (the terminal scrolls)
    console.print(table)
    console.print(f"95% confidence intervals, forgetting, bwt, params, time and the sweep objective: {out}/report.md")
    for line in sweep_lines(sweeps):
        console.print(line)
    if unhealthy:
        console.print(f"[yellow]{HEALTH_TITLE}:[/]")
        for line in unhealthy:
            console.print(line, markup=False)
    for r in incomplete:
        console.print(f"[yellow]incomplete[/] {r['run_dir']} ({len(r['acc'])}/{r['num_tasks']} tasks)")


def plot_all(runs: list[dict], out: Path) -> list[Path]:
    """The accuracy matrix of each run (and its task-prediction matrix where the method infers the task), average
    accuracy over tasks per setting, capacity over tasks for the mask methods, and gate usage per layer for gated."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    made = []
    for run in runs:
        made.append(_acc_heatmap(plt, run, plots))
        if run.get("task_prediction_acc"):  # gated's class scenario: how often its task classifier names the task
            made.append(_acc_heatmap(plt, run, plots, "task_prediction_acc"))
        if any(key in run["capacity"] for key in CAPACITY_CURVES):
            made += _capacity_over_tasks(plt, run, plots)
        if "frozen_fraction" in run["capacity"]:  # gated: the kernels each layer froze
            made.append(_gate_usage(plt, run, plots))
    made += _avg_acc_curves(plt, [r for r in runs if r["complete"]], plots)
    return [p for p in made if p is not None]


def _name(run: dict) -> str:
    return Path(run["run_dir"]).name if not Path(run["run_dir"]).name.isdigit() else \
        f"{Path(run['run_dir']).parent.name}_{Path(run['run_dir']).name}"


# A matrix of a run (row i: after task i) plotted by _acc_heatmap: its file prefix and colour-bar label.
HEATMAPS = {"acc": ("acc", "accuracy %"), "task_prediction_acc": ("task_prediction", "task predicted right %")}


def _acc_heatmap(plt, run, plots, key: str = "acc") -> Path:
    import numpy as np
    prefix, label = HEATMAPS[key]
    rows, t = run[key], run["num_tasks"]
    matrix = np.full((len(rows), t), np.nan)
    for i, row in enumerate(rows):
        matrix[i, : i + 1] = row[: i + 1]
    fig, ax = plt.subplots(figsize=(1 + 0.45 * t, 1 + 0.4 * len(rows)))
    image = ax.imshow(100 * matrix, vmin=0, vmax=100, cmap="viridis")
    ax.set(xlabel="evaluated on task", ylabel="after learning task",
           title=f"{run['method']} · {run['dataset']} · {run['scenario']} (seed {run['seed']})")
    ax.set_xticks(range(t), [str(j + 1) for j in range(t)])
    ax.set_yticks(range(len(rows)), [str(i + 1) for i in range(len(rows))])
    if t <= 10:
        for i in range(len(rows)):
            for j in range(i + 1):
                ax.text(j, i, f"{100 * matrix[i, j]:.0f}", ha="center", va="center", color="w", fontsize=7)
    fig.colorbar(image, ax=ax, label=label)
    return _save(plt, fig, plots / f"{prefix}_{_name(run)}.png")


def _avg_acc_curves(plt, runs, plots) -> list[Path]:
    import numpy as np
    settings = defaultdict(lambda: defaultdict(list))
    for run in runs:
        curve = [sum(row[: i + 1]) / (i + 1) for i, row in enumerate(run["acc"])]
        settings[(run["dataset"], run["tasks"], run["scenario"], run["backbone"])][run["method"]].append(curve)
    made = []
    for (dataset, tasks, scenario, backbone), by_method in sorted(settings.items()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for method, curves in sorted(by_method.items()):
            curves = np.array(curves) * 100
            x = np.arange(1, curves.shape[1] + 1)
            mean, std = curves.mean(0), curves.std(0, ddof=1) if len(curves) > 1 else np.zeros(curves.shape[1])
            ax.plot(x, mean, marker="o", label=f"{method} (n={len(curves)})")
            ax.fill_between(x, mean - std, mean + std, alpha=0.2)
        ax.set(xlabel="tasks learned", ylabel="average accuracy on seen tasks %",
               title=f"{dataset} ({tasks} tasks) · {scenario} scenario · {backbone}", xticks=x)
        ax.legend()
        ax.grid(alpha=0.3)
        made.append(_save(plt, fig, plots / f"avg_acc_{dataset}_{tasks}tasks_{scenario}_{backbone}.png"))
    return made


def _capacity_over_tasks(plt, run, plots) -> list[Path]:
    """From the capacity each task_end event carries: parameters and the free fraction over tasks."""
    caps = task_end_capacities(run["run_dir"])
    if not caps:
        return []
    keys = [k for k in CAPACITY_CURVES if k in caps[-1]]
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        ax.plot(range(1, len(caps) + 1), [c.get(key) for c in caps], marker="o")
        ax.set(xlabel="tasks learned", title=key, xticks=range(1, len(caps) + 1))
        ax.grid(alpha=0.3)
    fig.suptitle(f"{run['method']} capacity · {run['dataset']}")
    return [_save(plt, fig, plots / f"capacity_{_name(run)}.png")]


def _gate_usage(plt, run, plots) -> Path:
    usage = run["capacity"]["frozen_fraction"]
    fig, ax = plt.subplots(figsize=(1.5 + 0.5 * len(usage), 3.5))
    ax.bar(range(len(usage)), [100 * v for v in usage.values()])
    ax.set_xticks(range(len(usage)), list(usage), rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="kernels frozen %", title=f"{run['method']} · {run['dataset']} · {run['scenario']}")
    return _save(plt, fig, plots / f"gates_{_name(run)}.png")


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


RANKED_WITHIN = ("dataset", "tasks", "scenario", "protocol")  # --rank orders the methods of each such group
MARGIN = 1.0  # points of RA: --margin's default, the equivalence margin docs/parity.md uses
LABELLED = ("backbone", "ran_on")  # named beside a method where they differ within a ranked group (memory: always)
RANK_TITLE = ("RA % ranked, best first (mean ± std [95% CI] over runs). Between neighbours, and for every pair below "
              "them, the paired difference over the seeds both ran (cl_bench/stats.py, as docs/parity.md): "
              "'A > B (+d [95% CI], n seeds)' where the 95% interval of A - B lies wholly above the margin M, 'A ≈ B "
              "within M points' where its 90% interval lies inside ±M, 'A ? B undetermined' where neither: more "
              "seeds would tell; '<' in a group's line where the seeds both ran reverse the order of the means. "
              "Margin M: {} of RA (--margin).")


def ra_by_seed(runs: list[dict]) -> dict[int, float]:
    """A row's RA in points per seed (metrics.json's seed); a seed run twice in one row (the same run in two
    directories) counts once, at the mean of its runs. Runs that record no seed cannot be paired and are left out."""
    by_seed = defaultdict(list)
    for run in runs:
        if run.get("seed") is not None and run.get("avg_acc") is not None:
            by_seed[run["seed"]].append(100 * run["avg_acc"])
    return {seed: sum(v) / len(v) for seed, v in by_seed.items()}


def points(margin: float) -> str:
    return f"{margin:g} point" + ("" if margin == 1 else "s")


def compared(a: dict, b: dict, margin: float) -> tuple[str, str]:
    """The symbol between rows a and b (a ranked above b) and the line that says why: the paired difference a - b
    over their shared seeds and its verdict at `margin` points of RA."""
    from .stats import DIFFERENT, EQUIVALENT, paired
    d = paired(a["ra_by_seed"], b["ra_by_seed"])
    if d.n < 2:
        shared = "no shared seeds" if d.n == 0 else "1 shared seed"
        return "?", f"{a['label']} ? {b['label']}: {shared}, no paired comparison (it needs 2)"
    verdict = d.verdict(margin)
    if verdict == EQUIVALENT:
        return "≈", (f"{a['label']} ≈ {b['label']} within {points(margin)} ({d.mean:+.2f}, 90% CI [{d.ci90[0]:+.2f}, "
                     f"{d.ci90[1]:+.2f}], {d.n} seeds)")
    if verdict == DIFFERENT:  # the paired mean decides who is ahead: over shared seeds it can reverse the order
        ahead, behind, sign, symbol = (a, b, 1, ">") if d.mean > 0 else (b, a, -1, "<")
        low, high = sorted((sign * d.ci95[0], sign * d.ci95[1]))
        return symbol, (f"{ahead['label']} > {behind['label']} ({sign * d.mean:+.2f} [{low:+.2f}, {high:+.2f}], "
                        f"{d.n} seeds)")
    return "?", (f"{a['label']} ? {b['label']} undetermined ({d.n} seeds; {d.mean:+.2f} [{d.ci95[0]:+.2f}, "
                 f"{d.ci95[1]:+.2f}])")


def labelled(members: list[dict]) -> list[dict]:
    """The group's rows, best RA first, each with the label the ranking names it by: the method, its memory where
    it keeps one, and its backbone and hardware where those differ within the group (never two rows under one name).
    """
    differ = [k for k in LABELLED if len({r[k] for r in members}) > 1]
    out = []
    for row in sorted(members, key=lambda r: -r["avg_acc"]):
        extra = [f"memory {row['memory']}"] * bool(row["memory"]) + [f"{k.replace('_', ' ')} {row[k]}" for k in differ]
        out.append({**row, "label": row["method"] + (f" ({', '.join(extra)})" if extra else "")})
    return out


def ranking_lines(rows: list[dict], margin: float = MARGIN, every_pair: bool = True) -> list[str]:
    """Per dataset × tasks × scenario × protocol: one line with the rows by RA, best first, each with its 95%
    interval, and between neighbours the symbol of their paired verdict (compared); below it a line per neighbouring
    pair, and with every_pair one for each other pair (A ≈ B and B ≈ C do not make A ≈ C)."""
    groups = defaultdict(list)
    for row in rows:
        groups[tuple(row[k] for k in RANKED_WITHIN)].append(row)
    lines = []
    for key, members in sorted(groups.items()):
        members = labelled(members)
        text, why = f"{members[0]['label']} {fmt(members[0], 'avg_acc')}", []
        for upper, lower in zip(members, members[1:]):
            symbol, line = compared(upper, lower, margin)
            text += f" {symbol} {lower['label']} {fmt(lower, 'avg_acc')}"
            why.append(f"  - {line}")
        if every_pair and len(members) > 2:
            why += [f"  - {compared(members[i], members[j], margin)[1]}"
                    for i in range(len(members)) for j in range(i + 2, len(members))]
        lines.append(f"{' · '.join(str(k) for k in key)}, n={'/'.join(str(r['seeds']) for r in members)}: {text}")
        lines += why
    return lines


def report(paths: list[Path], out: Path | None = None, plots: bool = True, rank: bool = False,
           wide: bool = False, margin: float = MARGIN) -> list[dict]:
    """report.md, report.csv and the printed table over the runs under paths; rank: ranking.md, methods ordered
    by RA with paired verdicts at `margin` points of RA (a positive number; cl-bench report --margin)."""
    if not (margin > 0 and math.isfinite(margin)):  # before any work, --rank or not: a margin of 0 tells nothing
        raise UserError(f"--margin must be a positive number of RA points, not {margin:g}")
    runs = find_runs(paths)
    rows = summarise(runs)
    incomplete = [r for r in runs if not r["complete"]]
    sweeps = optimised(paths, runs)
    out = Path(out or paths[0])
    unhealthy = health_lines(runs)
    write_tables(rows, incomplete, sweeps, out, unhealthy)
    print_table(rows, incomplete, sweeps, out, wide, unhealthy)
    if rank and rows:
        title = RANK_TITLE.format(points(margin))
        every = ranking_lines(rows, margin)  # a group's pairs as a list under its line, groups a paragraph apart
        write_text_atomic(out / "ranking.md", title + "".join(("\n" if line.startswith("  - ") else "\n\n") + line
                                                              for line in every) + "\n")
        neighbours = ranking_lines(rows, margin, every_pair=False)  # the console keeps to neighbours
        print("\n".join([title, *neighbours]))
        if len(neighbours) < len(every):
            print(f"every pair: {out}/ranking.md")
    if plots:
        plot_all(runs, out)
    return rows
