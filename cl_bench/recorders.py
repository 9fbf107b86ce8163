"""Run events fanned out to the console (rich), JSON files and Weights & Biases. Recorders never touch
models: they receive numbers and the metrics record that train.py assembles."""
import json
import math
import secrets
import sys
import time
from pathlib import Path

from . import metrics, settings, shape
from .files import write_json_atomic, write_text_atomic


class Recorder:
    """Every event a run emits; each recorder overrides the ones it cares about."""

    def run_start(self, cfg, info, run_dir: Path, start_task: int): ...
    def task_start(self, task): ...
    def epoch_start(self, task_id: int, epoch: int, epochs: int, steps: int): ...
    def step(self): ...
    def epoch_end(self, task_id: int, epoch: int, loss: float): ...
    def task_end(self, task_id: int, record: dict): ...
    def checkpoint_saved(self, task_id: int, path: Path): ...
    def run_end(self, record: dict): ...
    def warning(self, message: str): ...
    def health(self, finding): ...  # a health check tripped (health.Finding)
    def close(self): ...


class Recorders:
    """The fan-out of every event to every recorder."""

    def __init__(self, recorders: list[Recorder]):
        self.recorders = recorders

    def __getattr__(self, event):
        def fan_out(*args, **kwargs):
            for r in self.recorders:
                getattr(r, event)(*args, **kwargs)
        return fan_out


SUMMARY = ("avg_acc", "val_avg_acc", "task_aware_avg_acc", "task_prediction_avg_acc", "forgetting", "bwt", "bti", "la")
MATRICES = ("acc", "val_acc", "task_aware_acc", "task_prediction_acc")  # row i: after task i


def step_metrics(record: dict) -> dict:
    """The per-task numbers, under the same names in events.jsonl and W&B: per seen task j its test accuracy,
    forgetting, validation accuracy and (class scenario) task-aware accuracy, then the summary figures."""
    acc = record["acc"]
    out = {f"acc/task_{j}": a for j, a in enumerate(acc[-1][: len(acc)])}
    out.update({f"forgetting/task_{j}": f for j, f in enumerate(metrics.task_forgetting(acc))})
    out.update({f"val_acc/task_{j}": a for j, a in enumerate(record["val_acc"][-1])})
    for key in ("task_aware_acc", "task_prediction_acc"):
        if key in record:
            out.update({f"{key}/task_{j}": a for j, a in enumerate(record[key][-1][: len(acc)])})
    out.update({k: record[k] for k in SUMMARY if k in record})
    return out


def read_events(run_dir) -> list[dict]:
    """A run's events.jsonl (JSONRecorder writes it), in order; none where the run has no such file."""
    path = Path(run_dir) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def task_end_capacities(run_dir) -> list[dict]:
    """Per finished task, in order, the capacity its task_end event carries (methods that report one)."""
    return [e["capacity"] for e in read_events(run_dir) if e.get("event") == "task_end" and "capacity" in e]


class JSONRecorder(Recorder):
    """metrics.json, rewritten after every task, and events.jsonl, one line per event."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.events = open(self.run_dir / "events.jsonl", "a")

    def _event(self, kind, **fields):
        self.events.write(json.dumps({"event": kind, "time": time.time(), **fields}) + "\n")
        self.events.flush()

    def task_start(self, task):
        self._event("task_start", task=task.id, classes=task.classes)

    def epoch_end(self, task_id, epoch, loss):
        self._event("epoch_end", task=task_id, epoch=epoch, loss=loss)

    def task_end(self, task_id, record):
        rows = {k: record[k][-1] for k in MATRICES if k in record}
        self._event("eval", task=task_id, step=len(record["acc"]), **rows)
        self._event("task_end", task=task_id, step=len(record["acc"]), **step_metrics(record),
                    capacity=record["capacity"])
        write_json_atomic(self.run_dir / "metrics.json", record)

    def warning(self, message):
        self._event("warning", message=message)

    def health(self, finding):
        self._event("health", **finding.as_dict())

    def run_end(self, record):
        self._event("run_end", **{k: record[k] for k in (*SUMMARY, "objective", "time_s") if k in record})
        write_json_atomic(self.run_dir / "metrics.json", record)

    def close(self):
        self.events.close()


def task_label(task_id: int, num_tasks: int) -> str:
    """How every line a user reads names a task: numbered from 0, as checkpoints/task_<ttt> and metrics.json's rows
    are, with the count beside it where it helps: task 0 of 5 to task 4 of 5."""
    return f"task {task_id} of {num_tasks}"


def resume_line(start_task: int, num_tasks: int) -> str:
    """What the console and train.log both say when a run resumes: the task it learns next, the tasks done."""
    if start_task >= num_tasks:
        return f"resuming with all {num_tasks} tasks done (tasks 0 to {num_tasks - 1})"
    done = "task 0" if start_task == 1 else f"tasks 0 to {start_task - 1}"
    return f"resuming at {task_label(start_task, num_tasks)} ({done} done)"


class ConsoleRecorder(Recorder):
    """On stderr, what watches a run: a live progress bar (task, epoch, the last epoch's loss), a line per task and
    the warnings. On stdout, what a user keeps: the accuracy matrix as a table and the summary, so that
    `cl-bench train > out.txt` holds the result."""

    def __init__(self):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from .console import rich_console
        self.console, self.out = rich_console(stderr=True), rich_console()
        # rich would proxy stdout into the bar's console (stderr) while it runs: only where both are the screen
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, transient=True,
                                 redirect_stdout=sys.stdout.isatty())
        self.bar = None
        self.loss = None  # the task's last epoch's mean loss: none before its first epoch ends (read once an epoch)

    def run_start(self, cfg, info, run_dir, start_task):
        self.info, self.run_dir = info, run_dir
        self.console.print(f"[bold]cl-bench[/] {cfg.method.name} on {cfg.dataset.name} ({cfg.scenario} scenario, "
                           f"{cfg.backbone.name}, {info.num_tasks} tasks) -> {run_dir}")
        self.console.print(f"setting: {settings.setting_label(cfg.setting)}")
        if start_task:
            self.console.print(resume_line(start_task, info.num_tasks))
        if self.console.is_terminal:  # a bar in a file or a log is never drawn, only blank lines where it stopped
            self.progress.start()

    def task_start(self, task):
        self.loss = None  # the previous task's loss would read as this one's

    def epoch_start(self, task_id, epoch, epochs, steps):
        self.at = (task_id, epoch, epochs)
        if self.bar is None:
            self.bar = self.progress.add_task("", total=steps)
        self.progress.reset(self.bar, total=steps, description=self._description())

    def step(self):
        if self.bar is not None:  # online methods stream without epochs
            self.progress.advance(self.bar)

    def epoch_end(self, task_id, epoch, loss):
        if math.isfinite(loss):
            self.loss = loss
        if self.bar is not None:  # the loss shows as soon as it is known, not at the next epoch's start
            self.progress.update(self.bar, description=self._description())

    def _description(self) -> str:
        task_id, epoch, epochs = self.at
        loss = "" if self.loss is None else f" · loss {self.loss:.4f}"
        return f"{task_label(task_id, self.info.num_tasks)} · epoch {epoch} of {epochs}{loss}"

    def task_end(self, task_id, record):
        self.console.print(f"task {task_id}: acc " + " ".join(f"{a:.3f}" for a in record["acc"][-1])
                           + f" · avg {record['avg_acc']:.4f} · val avg {_num(record['val_avg_acc'])}")
        if "shape" in record:
            self.console.print(shape.summary(record["shape"], task_id))

    def warning(self, message):
        self.console.print(f"[yellow]warning:[/] {message}")

    def health(self, finding):
        self.warning(finding.line())

    def run_end(self, record):
        self._stop()
        self.out.print(f"accuracy after each task ({record['method']}, {record['dataset']}, {record['scenario']})")
        self.out.print(result_table(record))
        aware = f"task-aware {record['task_aware_avg_acc']:.4f} · " if "task_aware_avg_acc" in record else ""
        self.out.print(f"avg_acc (RA) {record['avg_acc']:.4f} · val {_num(record['val_avg_acc'])} · {aware}"
                       f"BTI {record['bti']:+.4f} · LA {record['la']:.4f} · forgetting {record['forgetting']:.4f}"
                       f" · bwt {record['bwt']:+.4f} · {record['time_s']:.1f} s")
        if "shape" in record:
            self.out.print(shape.summary(record["shape"]))
        self.out.print(f"run directory: {self.run_dir}")

    def close(self):
        self._stop()

    def _stop(self):
        if self.progress.live.is_started:  # each stop of a bar not on a terminal prints a blank line
            self.progress.stop()


def result_table(record: dict):
    """The accuracy matrix, tasks numbered from 0 as its rows in metrics.json: row Ti after learning task i."""
    from rich.table import Table
    acc = record["acc"]
    table = Table()
    table.add_column("after")
    for j in range(record["num_tasks"]):
        table.add_column(f"T{j}", justify="right")
    for i, row in enumerate(acc):
        table.add_row(f"T{i}", *(f"{a:.3f}" if j <= i else "" for j, a in enumerate(row)))
    last = len(acc) - 1
    table.add_row(f"val, T{last}", *(_num(a, 3) for a in record["val_acc"][-1]), style="dim")
    for key, label in (("task_aware_acc", "task-aware"), ("task_prediction_acc", "task named")):
        if key in record:
            table.add_row(f"{label}, T{last}", *(_num(a, 3) for a in record[key][-1][: last + 1]), style="dim")
    return table


class StderrWarnings(Recorder):
    """Without the console (logger=none): warnings, a run's health findings among them, still reach stderr, one line
    each, as Python's warnings do whatever the logging; progress and tables stay silent."""

    def warning(self, message):
        print(f"cl-bench: warning: {message}", file=sys.stderr, flush=True)

    def health(self, finding):
        self.warning(finding.line())


class LogRecorder(Recorder):
    """The run's story in Python logging: under `cl-bench train` Hydra sends it to train.log in the run
    directory, where a failed run's traceback lands too (app.task)."""

    def __init__(self):
        import logging
        self.log = logging.getLogger("cl_bench")

    def run_start(self, cfg, info, run_dir, start_task):
        resuming = f"; {resume_line(start_task, info.num_tasks)}" if start_task else ""
        self.log.info(f"{cfg.method.name} on {cfg.dataset.name} ({cfg.scenario} scenario, {cfg.backbone.name}, "
                      f"{info.num_tasks} tasks, seed {cfg.seed}) in {run_dir}; setting: "
                      f"{settings.setting_label(cfg.setting)}{resuming}")

    def task_end(self, task_id, record):
        self.log.info(f"task {task_id}: acc {_row(record['acc'][-1])} · val {_row(record['val_acc'][-1])} · "
                      f"avg_acc {record['avg_acc']:.4f} · val_avg_acc {_num(record['val_avg_acc'])}")
        if "shape" in record:
            self.log.info(shape.summary(record["shape"], task_id))

    def warning(self, message):
        self.log.warning(message)

    def health(self, finding):
        self.log.warning(finding.line())

    def run_end(self, record):
        self.log.info("done: " + ", ".join(f"{k} {record[k]}" for k in (*SUMMARY, "time_s") if k in record))


def _num(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _row(values: list[float | None]) -> str:
    return " ".join(_num(v) for v in values)


class WandbRecorder(Recorder):
    """Weights & Biases: per-task metrics with the number of tasks learned as the step, the accuracy matrix
    as a table and the summary at the end. The run lives in <run_dir>/wandb; offline unless asked. Its id is kept
    in <run_dir>/wandb/run_id, so that `resume=` continues the same W&B run."""

    def __init__(self, cfg, run_dir: Path):
        import wandb
        from omegaconf import OmegaConf
        self.wandb, self.cfg = wandb, cfg.logger
        id_file = Path(run_dir) / "wandb" / "run_id"
        run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(4)
        if cfg.logger.mode != "disabled":
            id_file.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(id_file, run_id + "\n")
        self.run = wandb.init(project=cfg.logger.project, entity=cfg.logger.entity, mode=cfg.logger.mode,
                              dir=str(run_dir), id=run_id, resume="allow", name=cfg.logger.name or run_name(cfg),
                              group=cfg.logger.group,
                              tags=[cfg.method.name, cfg.dataset.name, cfg.scenario, *cfg.logger.tags],
                              config=OmegaConf.to_container(cfg, resolve=True))

    def checkpoint_saved(self, task_id: int, path: Path):
        if self.cfg.log_checkpoints:
            artifact = self.wandb.Artifact(f"{self.run.id}-checkpoint", type="checkpoint",
                                           metadata={"task": task_id})
            artifact.add_dir(str(path))
            self.run.log_artifact(artifact, aliases=[f"task_{task_id:03d}", "latest"])

    def task_end(self, task_id, record):
        # the step counts the tasks learned (1 after task 0); `task` names the task, as every other line does
        self.run.log({"task": task_id, **step_metrics(record)}, step=len(record["acc"]))

    def health(self, finding):
        self.run.alert(title=f"{finding.check} (task {finding.task})", text=finding.line(),
                       level=self.wandb.AlertLevel.WARN)

    def run_end(self, record):
        columns = ["after_task"] + [f"task_{j}" for j in range(record["num_tasks"])]
        tables = {}
        for name in MATRICES:
            if name in record:
                rows = [[i] + [row[j] if j <= i else None for j in range(record["num_tasks"])]
                        for i, row in enumerate(record[name])]
                tables[f"{name}_matrix"] = self.wandb.Table(columns=columns, data=rows)
        self.run.log(tables, step=len(record["acc"]))
        for key in (*SUMMARY, "objective", "time_s", "complete", "ran_on"):
            if key in record:
                self.run.summary[key] = record[key]
        if "health" in record:  # how many checks tripped, and which: a filter in the W&B runs table
            self.run.summary["health/tripped"] = record["health"]["tripped"]
            self.run.summary["health/checks"] = sorted({f["check"] for f in record["health"]["findings"]})

    def close(self):
        self.run.finish()


def run_name(cfg) -> str:
    return f"{cfg.method.name}_{cfg.dataset.name}_{cfg.scenario}_s{cfg.seed}"


def build(cfg, run_dir: Path) -> Recorders:
    recorders = [JSONRecorder(run_dir), LogRecorder()]
    recorders.append(ConsoleRecorder() if cfg.logger.console else StderrWarnings())
    if cfg.logger.wandb:
        recorders.append(WandbRecorder(cfg, run_dir))
    return Recorders(recorders)
