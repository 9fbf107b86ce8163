"""The one path from an accuracy matrix to the summary numbers, the same for every method.

acc[i][j] is the accuracy on task j's test set after learning task i (rows may also hold tasks j > i when
future tasks are evaluated, for forward transfer).
"""


def avg_acc(acc: list[list[float]]) -> float:
    """Mean accuracy over the tasks seen, after the last task learned."""
    n = len(acc)
    return sum(acc[-1][:n]) / n


def forgetting(acc: list[list[float]]) -> float:
    """Chaudhry et al. (2018): mean over old tasks of the best earlier accuracy minus the final one."""
    n = len(acc)
    if n < 2:
        return 0.0
    return sum(max(acc[i][j] for i in range(j, n - 1)) - acc[-1][j] for j in range(n - 1)) / (n - 1)


def bwt(acc: list[list[float]]) -> float:
    """Lopez-Paz & Ranzato (2017): mean over old tasks of the final accuracy minus that right after learning."""
    n = len(acc)
    if n < 2:
        return 0.0
    return sum(acc[-1][j] - acc[j][j] for j in range(n - 1)) / (n - 1)


def bti(acc: list[list[float]]) -> float:
    """Backward transfer and interference as GEM, MER and La-MAML print it: the mean over all T tasks of the final
    accuracy minus that right after learning (the last task adds 0), i.e. bwt * (T-1)/T."""
    n = len(acc)
    return sum(acc[-1][j] - acc[j][j] for j in range(n)) / n


def la(acc: list[list[float]]) -> float:
    """Learning accuracy (Riemer et al. 2019): the mean over tasks of the accuracy right after learning each."""
    return sum(acc[j][j] for j in range(len(acc))) / len(acc)


def fwt(acc: list[list[float]], random_init: list[float]) -> float:
    """Lopez-Paz & Ranzato (2017): mean over tasks j > 0 of the accuracy on j before learning it minus that
    of the randomly initialised model. Needs rows that reach one task ahead."""
    n = len(acc)
    if n < 2:
        return 0.0
    return sum(acc[j - 1][j] - random_init[j] for j in range(1, n)) / (n - 1)


def task_forgetting(acc: list[list[float]]) -> list[float]:
    """Per seen task: best earlier accuracy minus the current one (0 for the task just learned)."""
    n = len(acc)
    return [max((acc[i][j] for i in range(j, n - 1)), default=acc[-1][j]) - acc[-1][j] for j in range(n)]


def summary(acc: list[list[float]]) -> dict:
    return {"avg_acc": avg_acc(acc), "forgetting": forgetting(acc), "bwt": bwt(acc), "bti": bti(acc), "la": la(acc)}
