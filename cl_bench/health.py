"""Health checks: the states in which a method finishes without an error yet has stopped being itself (a task
that owns no weight, a compaction that never ran, gates that fire for nothing, a memory missing whole classes,
calibration that never moves, learning rates clipped to zero, a task learned to chance).

Each method names its checks (Method.health_checks) and evaluates them after every task from the state it already
has (Method.health), without another pass over data; this module holds the checks every method shares and the
record they go to. Checks only report: what a method does never depends on them. A tripped check becomes a
warning line (console, train.log, events.jsonl, a W&B alert), an entry of metrics.json's `health` section and a
mark in `cl-bench report`."""
import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Check:
    """A named degenerate state: what it means and the keys that change it."""

    name: str  # "<method family>.<state>", or a bare name for the checks every method shares
    means: str  # the state, in a phrase
    fix: str  # what to change, naming the config keys

    def found(self, task: int, detail: str) -> "Finding":
        return Finding(self.name, task, detail, self.fix)


@dataclass(frozen=True)
class Finding:
    """One check tripped after one task."""

    check: str
    task: int
    detail: str  # what the state is, with the numbers that show it
    fix: str

    def line(self) -> str:
        return f"health: task {self.task}: {self.check}: {self.detail}; {self.fix}"

    def as_dict(self) -> dict:
        return asdict(self)


CHANCE_LEVEL = Check("chance_level", "the task's accuracy right after learning it is no better than guessing",
                     "train it longer or faster (method.epochs, method.lr)")
MEMORY_CLASSES = Check("memory.classes_missing", "the rehearsal memory holds no sample of some seen class",
                       "raise method.memory_size (at least one sample per class of every task)")
SHARED = (CHANCE_LEVEL,)  # evaluated for every method, from the accuracy matrix
Z_95 = 1.96  # chance_level: the upper end of the two-sided 95% band of guessing's accuracy on the task's test set


def chance_level(task: int, accuracy: float, samples: int, outputs: int) -> Finding | None:
    """Trips when the accuracy right after learning the task lies within the 95% band of guessing among `outputs`
    classes on `samples` test samples (binomial, normal approximation)."""
    if not samples or outputs < 2:
        return None
    chance = 1 / outputs
    upper = chance + Z_95 * math.sqrt(chance * (1 - chance) / samples)
    if accuracy > upper:
        return None
    return CHANCE_LEVEL.found(task, f"test accuracy {accuracy:.4f} right after learning it, within guessing's band "
                                    f"(chance {chance:.4f} among {outputs} classes, up to {upper:.4f} on {samples} "
                                    "samples)")


def missing_classes(task: int, stored_labels: set[int], seen_classes: list[int], slots: int) -> Finding | None:
    """memory.classes_missing: trips when some class of the tasks seen has no sample in the memory."""
    missing = [c for c in seen_classes if c not in stored_labels]
    if not missing:
        return None
    shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
    return MEMORY_CLASSES.found(task, f"the memory ({slots} slots) holds no sample of {len(missing)} of the "
                                      f"{len(seen_classes)} classes seen ({shown})")


def section(checks: list[Check], findings: list[Finding]) -> dict:
    """metrics.json's `health`: the checks the run evaluated after every task and those that tripped."""
    return {"checks": [c.name for c in checks], "tripped": len(findings),
            "findings": [f.as_dict() for f in findings]}


def findings_of(section: dict | None) -> list[Finding]:
    """Back from a checkpoint's or metrics.json's health section."""
    return [Finding(**f) for f in (section or {}).get("findings", [])]
