"""Runs -> a paper-style table (mean ± std over seeds) and plots. Reads only run directories' files.

Runs are grouped by their learning settings (identity.settings): run.json's, else their .hydra/config.yaml's, else
(runs that kept neither) metrics.json's method, dataset and the like alone. A row is one setting; its runs differ
only in their seed, and a seed counts once."""
import csv
import difflib
import io
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from . import identity, rundirs
from .console import rich_console
from .errors import UserError
from .files import write_text_atomic
from .recorders import task_end_capacities

GROUP = ("method", "dataset", "tasks", "scenario", "backbone", "memory", "protocol", "ran_on")  # official-protocol
# runs are never averaged with honest ones, nor 20 permutations with 100, nor one GPU's with two nodes. These come
# from metrics.json (runs that kept no config have them too); the settings keys they show are no columns of their own.
SHOWN_AS = {"method.name": "method", "dataset.name": "dataset", "dataset.num_tasks": "tasks", "scenario": "scenario",
            "backbone.name": "backbone", "method.memory_size": "memory", "method.protocol": "protocol"}
METHODS_OWN = ("method.", "setting")  # keys of a method's own: its config, and the paper setting method=X picks
UNRECORDED = "?"  # a settings column's cell for a run that recorded no settings (never pooled with one that did)
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
# capacity is its own to declare, so the report names no method. Each with its axis title.
CAPACITY_CURVES = {"in_use_over_initial": "weights in use / initial", "growth": "weights / initial",
                   "free_fraction": "free weights / all weights"}
TEST_SELECTION = "test_avg_acc"
FEWEST_FOR_INTERVAL = 3  # t(0.975, 1) = 12.7: a 2-seed interval spans most of the scale
NO_INTERVAL = ("No interval below 3 seeds: Student's t at 2 seeds is 12.7, so a 2-seed interval would span most "
               "of the scale.")


def find_runs(paths: list[Path]) -> list[dict]:
    """Every run under the given run or sweep directories, as its metrics.json plus where it lives and its
    settings (None where it recorded none)."""
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
            run["settings"] = rundirs.recorded_settings(metrics_file.parent)
            runs.append(run)
    return runs


def canonical(settings: dict | None, key: str) -> str | None:
    """A settings value as the text a group compares (JSON), None where the run has no such key, UNRECORDED where
    the run recorded no settings."""
    if settings is None:
        return UNRECORDED
    return json.dumps(settings[key], sort_keys=True) if key in settings else None


def grouping_keys(runs: list[dict], by=(), ignore=()) -> list[str]:
    """The settings keys that tell apart runs that GROUP's columns (ignored ones aside) would pool: a method's own
    keys (METHODS_OWN) between runs of one method, every other key between runs of any methods, since --rank
    compares methods only at otherwise equal settings. Plus the --by keys; never the seed, nor what GROUP shows."""
    recorded = [r for r in runs if r["settings"] is not None]
    derived = [k for k in GROUP if k not in ignore and k != "method"]
    keys = set(by) - set(GROUP)
    for key in sorted({k for r in recorded for k in r["settings"]} - {identity.SEED, *SHOWN_AS, *ignore, *keys}):
        apart = [*derived, "method"] if key.startswith(METHODS_OWN) else derived
        values = defaultdict(set)
        for run in recorded:
            values[tuple(run[k] for k in apart)].add(canonical(run["settings"], key))
        if any(len(v) > 1 for v in values.values()):
            keys.add(key)
    return sorted(keys)


def chosen_keys(runs: list[dict], by=(), ignore=()) -> tuple[list[str], list[str]]:
    """--by and --ignore as column names (a key GROUP shows by its column's name), or a UserError naming the near
    matches of a key no run has."""
    known = {*GROUP, identity.SEED, *SHOWN_AS, *(k for r in runs for k in r["settings"] or {})}
    for flag, keys in (("--by", by), ("--ignore", ignore)):
        for key in keys:
            if key not in known:
                last = key.rsplit(".", 1)[-1]  # `lr` for method.lr
                near = list(dict.fromkeys([*difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.8),
                                           *sorted(k for k in known if k.rsplit(".", 1)[-1] == last)]))[:3]
                hint = f"did you mean {', '.join(near)}?" if near else "keys are config keys such as method.lr"
                raise UserError(f"{flag} {key}: no run reported has this setting; {hint}")
    if "method" in [SHOWN_AS.get(k, k) for k in ignore]:
        raise UserError("--ignore method: the method is what a report compares, it cannot be pooled")
    return [SHOWN_AS.get(k, k) for k in by], [SHOWN_AS.get(k, k) for k in ignore]


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


def summarise(runs: list[dict], keys=(), ignore=()) -> list[dict]:
    """One row per setting (GROUP's columns but the ignored, and the settings keys) over complete runs, a seed
    counting once, in a stable order."""
    groups = defaultdict(list)
    for run in runs:
        if run["complete"]:
            groups[group_of(run, keys, ignore)].append(run)
    rows = []
    for key in sorted(groups, key=lambda g: [natural(v) for v in g]):
        members, repeated = distinct_seeds(groups[key])
        row = {k: pooled(members, k) if k in ignore else members[0][k] for k in GROUP}
        row["settings"] = {k: canonical(members[0]["settings"], k) for k in keys}
        row["seeds"], row["repeated"] = len(members), repeated
        row["ra_by_seed"] = ra_by_seed(members)  # for --rank's paired differences; not a column
        row["objective"] = ",".join(sorted({r.get("objective", "unrecorded") for r in members}))
        row.update(health_of(members))
        for column in COLUMNS:
            values = [v for v in (_value(r, column) for r in members) if v is not None]
            mean, std = mean_std(values) if values else (math.nan, math.nan)
            row[column], row[f"{column}_std"], row[f"{column}_ci95"] = mean, std, ci95(std, len(values))
            row[f"{column}_n"] = len(values)
        rows.append(row)
    return rows


def group_of(run: dict, keys, ignore) -> tuple:
    return (*(str(run[k]) for k in GROUP if k not in ignore), *(str(canonical(run["settings"], k)) for k in keys))


def pooled(runs: list[dict], key: str) -> str:
    """An ignored GROUP column's cell: its values, one of each."""
    return "/".join(sorted({str(r[key]) for r in runs}, key=natural))


def distinct_seeds(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """A group's runs with each seed once: the first by run directory is kept; the others (a sweep run twice into
    two places) are returned apart, each marked with the run kept in its stead. Runs that record no seed are each
    their own."""
    kept, repeated, first = [], [], {}
    for run in sorted(runs, key=lambda r: r["run_dir"]):
        seed = run.get("seed")
        if seed is not None and seed in first:
            repeated.append({**run, "kept": first[seed]["run_dir"]})
            run["left_out"] = True  # nor plotted among the setting's curves
            continue
        if seed is not None:
            first[seed] = run
        kept.append(run)
    return kept, repeated


def natural(value) -> tuple:
    """Numbers in their order (2 before 10), then words."""
    try:
        return 0, float(value), ""
    except (TypeError, ValueError):
        return 1, 0.0, str(value)


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
    if interval and row[f"{column}_n"] >= FEWEST_FOR_INTERVAL:
        text += f" [{scale * (mean - half):.{digits}f}, {scale * (mean + half):.{digits}f}]"
    return text


def selection(row: dict) -> str:
    """What the row's runs returned to a sweeper, with test selection named as such."""
    return " ".join(f"{o} (TEST selection)" if o == TEST_SELECTION else o for o in row["objective"].split(","))


def grouping(keys) -> list[str]:
    """The grouping columns in their order: method and dataset first, the settings keys before the hardware."""
    return [*GROUP[:-1], *keys, GROUP[-1]]


def headers(keys=()) -> list[str]:
    return [*grouping(keys), "seeds", *METRICS.values(), "params", "weights in use", "time_s", "sweep objective",
            "health"]


def cells(row: dict, keys=()) -> list[str]:
    return [*(group_cell(row, k) for k in grouping(keys)), str(row["seeds"]), *(fmt(row, c) for c in COLUMNS),
            selection(row), health_cell(row)]


def group_cell(row: dict, key: str) -> str:
    if key in row["settings"]:
        return value_cell(row["settings"][key])
    if key == "memory":
        return str(row[key]) if row[key] else "–"
    return "official (selects on TEST)" if key == "protocol" and row[key] == "official" else str(row[key])


def value_cell(value: str | None) -> str:
    """A settings value as a cell: a string as itself, anything else as JSON; – where the run has no such key."""
    if value is None or value == UNRECORDED:
        return "–" if value is None else value
    shown = json.loads(value)
    return shown if isinstance(shown, str) else value


def label(row: dict, keys) -> str:
    """The row named by its method and its settings columns: `er (method.lr 0.05)`."""
    said = ", ".join(f"{k} {group_cell(row, k)}" for k in keys)
    return row["method"] + (f" ({said})" if said else "")


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


@dataclass
class Found:
    """What a report says: its rows, their settings columns, the lines said under the table (repeated seeds, pooled
    keys, runs without settings), the runs, sweeps and health findings listed apart, and the columns --by asked for
    (printed even where every row agrees)."""

    rows: list[dict]
    keys: list[str]
    notes: list[str]
    incomplete: list[dict]
    sweeps: list[dict]
    unhealthy: list[str]
    by: list[str]


def notes(runs: list[dict], rows: list[dict], keys, ignore) -> list[str]:
    """The lines under the table: each seed run twice at one setting, each pooled key, the runs without settings."""
    said = [f"- {label(row, keys)}, seed {r['seed']} ran twice: kept {r['kept']} (the first by run directory), "
            f"left {r['run_dir']} out of the means" for row in rows for r in row["repeated"]]
    for key in ignore:
        values = sorted({value_cell(canonical(r["settings"], key)) if key not in GROUP else str(r[key])
                         for r in runs if r["complete"]}, key=natural)
        said.append(f"- {key} pooled (--ignore): runs of {', '.join(values)} averaged as one setting")
    unrecorded = [r for r in runs if r["settings"] is None]
    if keys and unrecorded:
        said.append(f"- {UNRECORDED}: {len(unrecorded)} runs record no settings (no run.json settings, no "
                    ".hydra/config.yaml), kept apart from runs that do")
    return said


def write_tables(found: Found, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    few = [NO_INTERVAL] if any(r["seeds"] < FEWEST_FOR_INTERVAL for r in found.rows) else []
    lines = [" ".join(["Accuracies in %: mean ± sample std over runs [95% confidence interval, Student's t]. RA is the "
                       "test average accuracy, BTI the mean over all tasks of final minus just-learned accuracy, LA "
                       "the mean just-learned accuracy; val RA is on the validation splits that methods and sweeps "
                       "select on. n counts distinct seeds.", *few]), ""]
    head = headers(found.keys)
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells(r, found.keys)) + " |" for r in found.rows]
    if found.notes:
        lines += ["", *found.notes]
    if found.sweeps:
        lines += ["", "Sweeps that optimised an objective:", "", *sweep_lines(found.sweeps)]
    if found.unhealthy:
        lines += ["", f"{HEALTH_TITLE}:", "", *found.unhealthy]
    if found.incomplete:
        lines += ["", "Incomplete runs (not averaged):", ""]
        lines += [f"- {r['run_dir']}: {r['method']} on {r['dataset']}, {len(r['acc'])}/{r['num_tasks']} tasks"
                  for r in found.incomplete]
    write_text_atomic(out / "report.md", "\n".join(lines) + "\n")
    write_text_atomic(out / "report.csv", csv_text(found))


def csv_text(found: Found) -> str:
    fields = [*grouping(found.keys), "seeds", *(f for c in COLUMNS for f in (c, f"{c}_std", f"{c}_ci95")),
              "objective", "health_checked", "health_tripped", "health_checks"]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=fields)
    writer.writeheader()
    writer.writerows({k: group_cell(r, k) if k in found.keys else r[k] for k in fields} for r in found.rows)
    return table.getvalue()


HEALTH_TITLE = "Runs whose health checks tripped (metrics.json's health; each run's train.log says how to fix it)"
WIDE = 400  # characters: room for every column of --wide
CONSOLE = ("avg_acc", "val_avg_acc", "task_aware_avg_acc", "bti", "la")  # the rest is in report.md


def print_table(found: Found, out: Path, wide: bool = False) -> None:
    """The papers' figures, mean ± std, narrow enough for a terminal: the grouping columns whose value differs
    between rows (the others in the title) and CONSOLE's metrics that some row has; wide: every column of
    report.md, intervals aside. Confidence intervals and the rest are in report.md and report.csv."""
    from rich.console import Console
    from rich.table import Table
    rows, columns = found.rows, grouping(found.keys)
    varying = [k for k in columns if wide or k in ("method", *found.by) or len({group_cell(r, k) for r in rows}) > 1]
    shared = ", ".join(f"{k} {group_cell(rows[0], k)}" for k in columns if k not in varying and rows)
    metrics = COLUMNS if wide else [c for c in CONSOLE if any(not math.isnan(r[c]) for r in rows)]  # no empty ones
    table = Table(title="cl-bench report (accuracies in %, mean ± std over runs)" + (f"\n{shared}" if shared else ""))
    for column in [*varying, "n", *(METRICS.get(c, c).replace(" (test avg_acc)", "") for c in metrics), "health"]:
        table.add_column(column, justify="left" if column in (*columns, "health") else "right", no_wrap=True)
    for r in rows:
        table.add_row(*(group_cell(r, k) for k in varying), str(r["seeds"]),
                      *(fmt(r, c, interval=False) for c in metrics), health_cell(r, names=wide))
    console = Console(width=WIDE) if wide else rich_console()  # --wide: never squeezed (the terminal scrolls)
    console.print(table)
    for line in found.notes:
        console.print(line, markup=False, soft_wrap=True)  # run directories whole, never broken
    console.print(f"95% confidence intervals, forgetting, bwt, params, time and the sweep objective: {out}/report.md")
    for line in sweep_lines(found.sweeps):
        console.print(line)
    if found.unhealthy:
        console.print(f"[yellow]{HEALTH_TITLE}:[/]")
        for line in found.unhealthy:
            console.print(line, markup=False)
    for r in found.incomplete:
        console.print(f"[yellow]incomplete[/] {r['run_dir']} ({len(r['acc'])}/{r['num_tasks']} tasks)")


def plots_available() -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None
        return False


def plot_all(runs: list[dict], out: Path, keys=()) -> list[Path]:
    """The accuracy matrix of each run (and its task-prediction matrix where the method infers the task), average
    accuracy over tasks per setting, capacity over tasks for the mask methods, and gate usage per layer for gated."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    stems, made = plot_stems(runs, keys), []
    for run in runs:
        name, said = stems[run["run_dir"]], run_settings_said(run, keys)
        made.append(_acc_heatmap(plt, run, plots, name, said))
        if run.get("task_prediction_acc"):  # gated's class scenario: how often its task classifier names the task
            made.append(_acc_heatmap(plt, run, plots, name, said, "task_prediction_acc"))
        if any(key in run["capacity"] for key in CAPACITY_CURVES):
            made += _capacity_over_tasks(plt, run, plots, name)
        if "frozen_fraction" in run["capacity"]:  # gated: the kernels each layer froze
            made.append(_gate_usage(plt, run, plots, name))
    made += _avg_acc_curves(plt, [r for r in runs if r["complete"] and not r.get("left_out")], plots, keys)
    return [p for p in made if p is not None]


def plot_stems(runs: list[dict], keys) -> dict[str, str]:
    """Each run's plot name: its method, the values that tell it from the other runs (GROUP's columns that differ,
    the settings keys, by their last part: lr0.05) and its seed; its folder's name added where two would share one,
    then a number where even that would."""
    differ = [k for k in GROUP[1:] if len({str(r[k]) for r in runs}) > 1]
    stems = {r["run_dir"]: "_".join(filter(None, map(sanitized, stem_parts(r, differ, keys)))) for r in runs}
    shared = Counter(stems.values())
    for run in runs:
        if shared[stems[run["run_dir"]]] > 1:
            stems[run["run_dir"]] += f"_{sanitized(_name(run))}"
    seen = Counter()
    for run_dir, stem in stems.items():
        seen[stem] += 1
        stems[run_dir] = stem if seen[stem] == 1 else f"{stem}-{seen[stem]}"
    return stems


STEM_PREFIX = {"tasks": "tasks", "memory": "memory"}  # GROUP columns whose value alone says too little


def stem_parts(run: dict, differ, keys) -> list[str]:
    seed = [] if run.get("seed") is None else [f"seed{run['seed']}"]
    return [run["method"], *(f"{STEM_PREFIX.get(k, '')}{run[k]}" for k in differ),
            *(key.rsplit(".", 1)[-1] + value_cell(canonical(run["settings"], key)) for key in keys), *seed]


def sanitized(part: str) -> str:
    """A file name's part: letters, digits, and . _ + -; anything else one minus each run of it."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", part).strip("-")


def run_settings_said(run: dict, keys) -> str:
    """`method.lr 0.05, seed 1`: the run's settings columns and seed, as a plot's title says them."""
    said = [f"{k} {value_cell(canonical(run['settings'], k))}" for k in keys]
    return ", ".join([*said, f"seed {run.get('seed')}"])


def _name(run: dict) -> str:
    return Path(run["run_dir"]).name if not Path(run["run_dir"]).name.isdigit() else \
        f"{Path(run['run_dir']).parent.name}_{Path(run['run_dir']).name}"


# A matrix of a run (row i: after task i) plotted by _acc_heatmap: its file prefix and colour-bar label.
HEATMAPS = {"acc": ("acc", "accuracy %"), "task_prediction_acc": ("task_prediction", "task predicted right %")}


def _acc_heatmap(plt, run, plots, name: str, said: str, key: str = "acc") -> Path:
    import numpy as np
    prefix, colour_label = HEATMAPS[key]
    rows, t = run[key], run["num_tasks"]
    matrix = np.full((len(rows), t), np.nan)
    for i, row in enumerate(rows):
        matrix[i, : i + 1] = row[: i + 1]
    # constrained layout and a suptitle: the title spans the colour bar too, never cut under it
    fig, ax = plt.subplots(figsize=(max(4, 1.5 + 0.45 * t), 1.4 + 0.4 * len(rows)), layout="constrained")
    image = ax.imshow(100 * matrix, vmin=0, vmax=100, cmap="viridis")
    ax.set(xlabel="evaluated on task", ylabel="after learning task")
    fig.suptitle(f"{run['method']} · {run['dataset']} · {run['scenario']}\n{said}", fontsize=10)
    ax.set_xticks(range(t), [str(j) for j in range(t)])  # tasks numbered from 0, as everywhere
    ax.set_yticks(range(len(rows)), [str(i) for i in range(len(rows))])
    if t <= 10:
        for i in range(len(rows)):
            for j in range(i + 1):
                ax.text(j, i, f"{100 * matrix[i, j]:.0f}", ha="center", va="center", color="w", fontsize=7)
    fig.colorbar(image, ax=ax, label=colour_label)
    return _save(plt, fig, plots / f"{prefix}_{name}.png")


def _avg_acc_curves(plt, runs, plots, keys) -> list[Path]:
    import numpy as np
    settings = defaultdict(lambda: defaultdict(list))
    for run in runs:
        curve = [sum(row[: i + 1]) / (i + 1) for i, row in enumerate(run["acc"])]
        said = ", ".join(f"{k} {value_cell(canonical(run['settings'], k))}" for k in keys)
        settings[(run["dataset"], run["tasks"], run["scenario"], run["backbone"])][
            run["method"] + (f" ({said})" if said else "")].append(curve)
    made = []
    for (dataset, tasks, scenario, backbone), by_setting in sorted(settings.items()):
        fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
        for name, curves in sorted(by_setting.items()):
            curves = np.array(curves) * 100
            x = np.arange(1, curves.shape[1] + 1)
            mean, std = curves.mean(0), curves.std(0, ddof=1) if len(curves) > 1 else np.zeros(curves.shape[1])
            ax.plot(x, mean, marker="o", label=f"{name} (n={len(curves)})")
            ax.fill_between(x, mean - std, mean + std, alpha=0.2)
        ax.set(xlabel="tasks learned", ylabel="average accuracy on seen tasks %",
               title=f"{dataset} ({tasks} tasks) · {scenario} scenario · {backbone}", xticks=x)
        ax.legend()
        ax.grid(alpha=0.3)
        made.append(_save(plt, fig, plots / f"avg_acc_{dataset}_{tasks}tasks_{scenario}_{backbone}.png"))
    return made


def _capacity_over_tasks(plt, run, plots, name: str) -> list[Path]:
    """From the capacity each task_end event carries: parameters and the free fraction over tasks."""
    caps = task_end_capacities(run["run_dir"])
    if not caps:
        return []
    keys = [k for k in CAPACITY_CURVES if k in caps[-1]]
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2), squeeze=False, layout="constrained")
    for ax, key in zip(axes[0], keys):
        ax.plot(range(1, len(caps) + 1), [c.get(key) for c in caps], marker="o")
        ax.set(xlabel="tasks learned", title=CAPACITY_CURVES[key], xticks=range(1, len(caps) + 1))
        ax.grid(alpha=0.3)
    fig.suptitle(f"{run['method']} capacity · {run['dataset']}")
    return [_save(plt, fig, plots / f"capacity_{name}.png")]


def _gate_usage(plt, run, plots, name: str) -> Path:
    usage = run["capacity"]["frozen_fraction"]
    fig, ax = plt.subplots(figsize=(1.5 + 0.5 * len(usage), 3.5), layout="constrained")
    ax.bar(range(len(usage)), [100 * v for v in usage.values()])
    ax.set_xticks(range(len(usage)), list(usage), rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="kernels frozen %", title=f"{run['method']} · {run['dataset']} · {run['scenario']}")
    return _save(plt, fig, plots / f"gates_{name}.png")


def _save(plt, fig, path: Path) -> Path:
    fig.savefig(path, dpi=110, bbox_inches="tight")  # tight: a title wider than the figure widens the image
    plt.close(fig)
    return path


# --rank orders the methods of rows equal on every other grouping column; these name the group always, the others
# where they differ between groups (memory: beside each method).
RANKED_WITHIN = ("dataset", "tasks", "scenario", "protocol")
MARGIN = 1.0  # points of RA: --margin's default, the equivalence margin docs/parity.md uses
RANK_TITLE = ("RA % ranked, best first (mean ± std [95% CI] over runs). Between neighbours, and for every pair below "
              "them, the paired difference over the seeds both ran (cl_bench/stats.py, as docs/parity.md): "
              "'A > B (+d [95% CI], n seeds)' where the 95% interval of A - B lies wholly above the margin M, 'A ≈ B "
              "within M points' where its 90% interval lies inside ±M, 'A ? B undetermined' where neither: more "
              "seeds would tell; '<' in a group's line where the seeds both ran reverse the order of the means. "
              "Margin M: {} of RA (--margin).")


def ra_by_seed(runs: list[dict]) -> dict[int, float]:
    """A row's RA in points per seed (metrics.json's seed; a row holds each seed once). Runs that record no seed
    cannot be paired and are left out."""
    return {r["seed"]: 100 * r["avg_acc"] for r in runs if r.get("seed") is not None and r.get("avg_acc") is not None}


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
    """The group's rows, best RA first, each with the label the ranking names it by: the method, and its memory
    where it keeps one."""
    return [{**row, "label": row["method"] + (f" (memory {row['memory']})" if row["memory"] else "")}
            for row in sorted(members, key=lambda r: -r["avg_acc"])]


def ranked_groups(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The rows equal on every grouping column but the method, each group named by RANKED_WITHIN's values and the
    other columns (memory aside) that differ between groups."""
    others = [k for k in grouping(rows[0]["settings"] if rows else ()) if k != "method"]
    named = [*RANKED_WITHIN, *(k for k in others if k not in (*RANKED_WITHIN, "memory")
                               and len({group_cell(r, k) for r in rows}) > 1)]
    groups = defaultdict(list)
    for row in rows:
        groups[tuple(group_cell(row, k) for k in others)].append(row)
    found = [(" · ".join(group_cell(m[0], k) if k in RANKED_WITHIN else f"{k} {group_cell(m[0], k)}" for k in named),
              m) for _, m in sorted(groups.items(), key=lambda g: [natural(v) for v in g[0]])]
    return found


def ranking_lines(rows: list[dict], margin: float = MARGIN, every_pair: bool = True) -> list[str]:
    """Per group of rows equal but for the method (ranked_groups): one line with the rows by RA, best first, each
    with its 95% interval, and between neighbours the symbol of their paired verdict (compared); below it a line per
    neighbouring pair, and with every_pair one for each other pair (A ≈ B and B ≈ C do not make A ≈ C)."""
    lines = []
    for name, members in ranked_groups(rows):
        members = labelled(members)
        text, why = f"{members[0]['label']} {fmt(members[0], 'avg_acc')}", []
        for upper, lower in zip(members, members[1:]):
            symbol, line = compared(upper, lower, margin)
            text += f" {symbol} {lower['label']} {fmt(lower, 'avg_acc')}"
            why.append(f"  - {line}")
        if every_pair and len(members) > 2:
            why += [f"  - {compared(members[i], members[j], margin)[1]}"
                    for i in range(len(members)) for j in range(i + 2, len(members))]
        lines.append(f"{name}, n={'/'.join(str(r['seeds']) for r in members)}: {text}")
        lines += why
    return lines


def report(paths: list[Path], out: Path | None = None, plots: bool = True, rank: bool = False,
           wide: bool = False, margin: float = MARGIN, by=(), ignore=()) -> list[dict]:
    """report.md, report.csv and the printed table over the runs under paths, a row per setting (by: keys made
    grouping columns even where they do not differ; ignore: keys pooled); rank: ranking.md, methods ordered by RA
    with paired verdicts at `margin` points of RA (a positive number; cl-bench report --margin)."""
    if not (margin > 0 and math.isfinite(margin)):  # before any work, --rank or not: a margin of 0 tells nothing
        raise UserError(f"--margin must be a positive number of RA points, not {margin:g}")
    runs = find_runs(paths)
    by, ignore = chosen_keys(runs, by, ignore)
    keys = grouping_keys([r for r in runs if r["complete"]], by, ignore)  # the rows' runs
    rows = summarise(runs, keys, ignore)
    found = Found(rows, keys, notes(runs, rows, keys, ignore), [r for r in runs if not r["complete"]],
                  optimised(paths, runs), health_lines(runs), by)
    out = Path(out or paths[0])
    write_tables(found, out)
    print_table(found, out, wide)
    if rank and rows:
        write_ranking(rows, out, margin)
    if plots and not plots_available():
        print("plots skipped: matplotlib is not installed (pip install 'cl-bench[plots]', or --no-plots to silence "
              "this)")
    elif plots:
        plot_all(runs, out, keys)
    return rows


def write_ranking(rows: list[dict], out: Path, margin: float) -> None:
    """ranking.md with every pair; the console with the neighbours."""
    few = [NO_INTERVAL] if any(r["seeds"] < FEWEST_FOR_INTERVAL for r in rows) else []
    title = " ".join([RANK_TITLE.format(points(margin)), *few])
    every = ranking_lines(rows, margin)  # a group's pairs as a list under its line, groups a paragraph apart
    write_text_atomic(out / "ranking.md", title + "".join(("\n" if line.startswith("  - ") else "\n\n") + line
                                                          for line in every) + "\n")
    neighbours = ranking_lines(rows, margin, every_pair=False)  # the console keeps to neighbours
    print("\n".join([title, *neighbours]))
    if len(neighbours) < len(every):
        print(f"every pair: {out}/ranking.md")
