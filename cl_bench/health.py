"""Health checks: the states in which a method finishes without an error yet has stopped being itself (a task
that owns no weight, a compaction that never ran, gates that fire for nothing, a memory missing whole classes,
calibration that never moves, learning rates clipped to zero, a task learned to chance).

Each method names its checks (Traits.health_checks) and evaluates them after every task from the state it already
has (Method.health), without another pass over data; this module holds the checks every method shares, each
registered once with the function that evaluates it (`@shared`), and the record they go to: metrics.json lists the
checks the run evaluated. Checks only report: what a method does never depends on them. A tripped check becomes a
warning line (console, train.log, events.jsonl, a W&B alert), an entry of metrics.json's `health` section and a mark
in `cl-bench report`."""
import math
from collections.abc import Callable
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


@dataclass(frozen=True)
class Outcome:
    """What the shared checks read after learning a task, from the run's evaluation."""

    task: int
    accuracy: float  # its test accuracy right after learning it
    samples: int  # its test samples
    outputs: int  # the outputs a prediction chose among (its classes in the task scenario, every seen one else)


Evaluate = Callable[[Outcome], "Finding | None"]
SHARED: list[tuple[Check, Evaluate]] = []  # every method's run evaluates each after every task (evaluate_shared)


def shared(check: Check) -> Callable[[Evaluate], Evaluate]:
    """Register the decorated function as the evaluation of `check` for every method's run: the one place a shared
    check is named, so that none is listed without being evaluated."""
    def register(evaluate: Evaluate) -> Evaluate:
        SHARED.append((check, evaluate))
        return evaluate
    return register


def evaluate_shared(outcome: Outcome) -> tuple[list[Check], list[Finding]]:
    """Every shared check on a task's outcome: the checks evaluated, and the findings of those that tripped."""
    checks, findings = [], []
    for check, evaluate in SHARED:
        checks.append(check)
        finding = evaluate(outcome)
        if finding is not None:
            findings.append(finding)
    return checks, findings


CHANCE_LEVEL = Check("chance_level", "the task's accuracy right after learning it is no better than guessing",
                     "train it longer or faster (method.epochs, method.lr)")
MEMORY_CLASSES = Check("memory.classes_missing", "the rehearsal memory holds no sample of some seen class",
                       "raise method.memory_size (at least one sample per class of every task)")
Z_95 = 1.96  # chance_level: the upper end of the two-sided 95% band of guessing's accuracy on the task's test set


@shared(CHANCE_LEVEL)
def chance_level(outcome: Outcome) -> Finding | None:
    """Trips when the accuracy right after learning the task lies within the 95% band of guessing among its
    outputs on its test samples (binomial, normal approximation)."""
    samples, outputs = outcome.samples, outcome.outputs
    if not samples or outputs < 2:
        return None
    chance = 1 / outputs
    upper = chance + Z_95 * math.sqrt(chance * (1 - chance) / samples)
    if outcome.accuracy > upper:
        return None
    return CHANCE_LEVEL.found(outcome.task, f"test accuracy {outcome.accuracy:.4f} right after learning it, within "
                                            f"guessing's band (chance {chance:.4f} among {outputs} classes, up to "
                                            f"{upper:.4f} on {samples} samples)")


def missing_classes(task: int, stored_labels: set[int], seen_classes: list[int], slots: int) -> Finding | None:
    """memory.classes_missing: trips when some class of the tasks seen has no sample in the memory."""
    missing = [c for c in seen_classes if c not in stored_labels]
    if not missing:
        return None
    shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
    return MEMORY_CLASSES.found(task, f"the memory ({slots} slots) holds no sample of {len(missing)} of the "
                                      f"{len(seen_classes)} classes seen ({shown})")


def section(checked: list[str], findings: list[Finding]) -> dict:
    """metrics.json's `health`: the names of the checks the run evaluated (in the order first evaluated) and the
    findings of those that tripped."""
    return {"checks": list(checked), "tripped": len(findings), "findings": [f.as_dict() for f in findings]}


def findings_of(section: dict | None) -> list[Finding]:
    """Back from a checkpoint's or metrics.json's health section."""
    return [Finding(**f) for f in (section or {}).get("findings", [])]


def checked_of(section: dict | None) -> list[str]:
    """The checks evaluated so far, back from a checkpoint's health section (none where it recorded none)."""
    return list((section or {}).get("checks", []))
