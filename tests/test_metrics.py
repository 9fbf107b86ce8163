import pytest

from cl_bench import metrics

# acc[i][j]: accuracy on task j after learning task i, worked by hand below.
ACC = [
    [0.9],
    [0.7, 0.8],
    [0.6, 0.85, 0.95],
]


def test_avg_acc_is_the_mean_of_the_last_row():
    assert metrics.avg_acc(ACC) == pytest.approx((0.6 + 0.85 + 0.95) / 3)


def test_forgetting_uses_the_best_earlier_accuracy():
    # task 0: best of 0.9, 0.7 is 0.9, final 0.6 -> 0.3; task 1: best 0.8, final 0.85 -> -0.05
    assert metrics.forgetting(ACC) == pytest.approx((0.3 - 0.05) / 2)


def test_bwt_compares_with_the_accuracy_right_after_learning():
    # task 0: 0.6 - 0.9 = -0.3; task 1: 0.85 - 0.8 = +0.05
    assert metrics.bwt(ACC) == pytest.approx((-0.3 + 0.05) / 2)


def test_bti_averages_over_all_tasks_as_gem_and_la_maml_print_it():
    # (0.6 - 0.9) + (0.85 - 0.8) + (0.95 - 0.95) over T = 3 tasks, i.e. bwt * 2/3
    assert metrics.bti(ACC) == pytest.approx((-0.3 + 0.05 + 0.0) / 3)
    assert metrics.bti(ACC) == pytest.approx(metrics.bwt(ACC) * 2 / 3)


def test_la_is_the_mean_accuracy_right_after_learning():
    assert metrics.la(ACC) == pytest.approx((0.9 + 0.8 + 0.95) / 3)


def test_fwt_against_the_random_init_reference():
    acc = [[0.9, 0.6, 0.5], [0.7, 0.8, 0.55], [0.6, 0.85, 0.95]]
    # before task 1: 0.6 vs random 0.5 -> 0.1; before task 2: 0.55 vs 0.5 -> 0.05
    assert metrics.fwt(acc, [0.5, 0.5, 0.5]) == pytest.approx(0.075)


def test_per_task_forgetting():
    assert metrics.task_forgetting(ACC) == pytest.approx([0.3, -0.05, 0.0])


def test_a_single_task_forgets_nothing():
    assert metrics.summary([[0.5]]) == {"avg_acc": 0.5, "forgetting": 0.0, "bwt": 0.0, "bti": 0.0, "la": 0.5}
