"""CPG point by point against ivclab/CPG (CPG_cifar100_main_normal.py, its scripts and tools): the choice of
pruning ratio, pruning when growth runs out, the train-accuracy rules, the picking refit, the mask lr rule, the
goal model's weight decay, what a new task inherits, the initialisation, PackNet's retraining lr drop, the
official protocol and the capacity report. The official behaviour is written out here from the reference, and
each method phase is driven with scripted accuracies where the rule is about decisions, not training."""
import json
import math
import shutil

import pytest
import torch
from conftest import cl_bench, once_per_session, train
from test_packnet_cpg import COMMON, TINY, build, compose_cfg

from cl_bench.data import scenarios
from cl_bench.methods.cpg import REFIT_OUTCOMES, must_ratio
from cl_bench.nn import masked

pytestmark = pytest.mark.usefixtures("one_thread")
TARGETS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
CPG_MLP = [arg for arg in TINY["cpg"] if not arg.startswith("backbone")]  # add backbone=mlp with its widths


def scripted_cpg(monkeypatch, accuracies: dict, train_accs: dict | None = None, num_tasks: int = 5,
                 allow_acc_loss: float = 0.0):
    """A CPG whose compacting phase is scripted: the selection accuracy and training accuracy after each target
    come from the dicts, and snapshots are the sparsity they were taken at, so restore() tells what was kept."""
    cfg, tasks, make = build(*TINY["cpg"], *COMMON, f"dataset.num_tasks={num_tasks}",
                             f"method.prune_targets=[{','.join(map(str, TARGETS))}]",
                             f"method.allow_acc_loss={allow_acc_loss}")
    method = make()
    state = {"sparsity": 0.0, "tried": [], "kept": None}
    monkeypatch.setattr(method, "gradual_prune", lambda task, initial, target: ((
        state["tried"].append(target), state.update(sparsity=target), (train_accs or {}).get(target, 1.0))[-1]))
    monkeypatch.setattr(method, "accuracy", lambda split, task_id, model=None: accuracies[state["sparsity"]])
    monkeypatch.setattr(method, "snapshot", lambda: state["sparsity"])
    monkeypatch.setattr(method, "restore", lambda snap: state.update(kept=snap))
    return method, tasks, state


def test_a_dip_does_not_end_compaction_and_the_highest_passing_ratio_is_kept(monkeypatch):
    # choose_appropriate_pruning_ratio_for_next_task.py: every target recorded, then the highest one whose
    # accuracy meets the goal; here 0.2 dips below it and 0.7 is the last to meet it
    accs = dict(zip(TARGETS, [0.91, 0.84, 0.90, 0.92, 0.90, 0.88, 0.86, 0.80, 0.70, 0.60]))
    method, tasks, state = scripted_cpg(monkeypatch, accs)
    acc = method.compact(tasks[1], 0.85, 0.93, exhausted=False)
    assert state["tried"] == TARGETS and state["kept"] == 0.7 and acc == 0.86


def test_an_allowed_accuracy_loss_lets_a_sparser_ratio_pass_as_the_reference_chooser_does(monkeypatch):
    # choose_appropriate_pruning_ratio_for_next_task.py: a ratio passes when acc + allow_acc_loss >= the goal; with
    # 0.05 the goal 0.85 lets 0.8 (0.80) pass, the highest ratio within it; 0.9 (0.70) stays out
    accs = dict(zip(TARGETS, [0.91, 0.84, 0.90, 0.92, 0.90, 0.88, 0.86, 0.80, 0.70, 0.60]))
    method, tasks, state = scripted_cpg(monkeypatch, accs, allow_acc_loss=0.05)
    assert method.compact(tasks[1], 0.85, 0.93, exhausted=False) == 0.80 and state["kept"] == 0.8


def test_a_failure_at_the_first_ratio_does_not_keep_everything(monkeypatch):
    accs = dict(zip(TARGETS, [0.80, 0.90, 0.90, 0.89, 0.70, 0.6, 0.6, 0.6, 0.6, 0.6]))
    method, tasks, state = scripted_cpg(monkeypatch, accs)
    assert method.compact(tasks[1], 0.85, 0.93, exhausted=False) == 0.89 and state["kept"] == 0.4


def test_no_passing_ratio_keeps_the_unpruned_model(monkeypatch):
    method, tasks, state = scripted_cpg(monkeypatch, dict.fromkeys(TARGETS, 0.5))
    assert method.compact(tasks[1], 0.85, 0.93, exhausted=False) == 0.93 and state["kept"] == 0.0


# main: ratio_allow_for_curr_task = round(1.0 / (remain_num_tasks + 1), 1), pruned to 1 - that; Python's round
OFFICIAL_MUST = {19: 0.9, 9: 0.9, 6: 0.9, 5: 0.8, 4: 0.8, 3: 0.8, 2: 0.7, 1: 0.5, 0: 0.0}


@pytest.mark.parametrize("left", sorted(OFFICIAL_MUST))
def test_the_ratio_a_task_is_pruned_to_when_growth_runs_out(left):
    assert must_ratio(left) == pytest.approx(OFFICIAL_MUST[left])


def test_an_exhausted_task_keeps_its_highest_recorded_ratio_whatever_its_accuracy(monkeypatch):
    # second-to-last task of 5 (one left): the sweep stops once it reaches 0.5 and keeps it, below the goal
    method, tasks, state = scripted_cpg(monkeypatch, dict.fromkeys(TARGETS, 0.3))
    assert method.compact(tasks[3], 0.85, 0.6, exhausted=True) == 0.3
    assert state["tried"] == [0.1, 0.2, 0.3, 0.4, 0.5] and state["kept"] == 0.5
    method, tasks, state = scripted_cpg(monkeypatch, dict.fromkeys(TARGETS, 0.3))
    method.compact(tasks[4], 0.85, 0.6, exhausted=True)  # the last task: nothing to leave room for
    assert state["tried"] == [] and state["kept"] == 0.0


def test_compaction_stops_when_training_accuracy_drops_to_the_bar(monkeypatch):
    # main, prune mode: a target is recorded only with train accuracy above 0.95, else the script breaks off
    method, tasks, state = scripted_cpg(monkeypatch, dict.fromkeys(TARGETS, 0.9), train_accs={0.4: 0.95})
    method.compact(tasks[1], 0.85, 0.93, exhausted=False)
    assert state["tried"] == [0.1, 0.2, 0.3, 0.4] and state["kept"] == 0.3


def test_growth_needs_both_the_goal_and_training_accuracy_above_the_bar(monkeypatch):
    # main, finetune mode: `if avg_train_acc > 0.95 and avg_val_acc >= baseline_acc: pass ... else: expand`
    cfg, tasks, make = build(*TINY["cpg"], *COMMON, "method.max_multiplier=2.0")
    for results, grows in (([(0.9, 0.95), (0.9, 0.99)], True), ([(0.9, 0.99)], False),
                           ([(0.8, 0.99), (0.8, 0.99), (0.8, 0.99)], True)):
        method = make()
        method.begin_task(0)
        scripted = iter(results)
        monkeypatch.setattr(method, "pick_and_train", lambda task, r=scripted: next(r))
        acc, exhausted = method.pick_and_grow(tasks[0], goal=0.85)
        assert (float(method.param_multiplier) > 1) == grows
        assert exhausted == (acc < 0.85) and (not exhausted or float(method.param_multiplier) == 2.0)


def test_the_refit_restarts_the_mask_and_keeps_its_best_epoch(monkeypatch):
    """--finetune_again: piggymask re-filled with 0.01, best epoch saved while validation improves, stop after 5
    epochs without gain; the refit is kept when it beats the accuracy of the restarted mask."""
    cfg, tasks, make = build(*TINY["cpg"], *COMMON)
    method = make()
    method.learn(tasks[0])
    method.begin_task(1)
    for layer in method.layers:
        layer.score.data.fill_(0.5)  # as if trained
    epoch_accs = iter([0.70, 0.72, 0.75, 0.74, 0.73, 0.75, 0.71, 0.70, 0.99])  # [restart, epoch 0, 1, ...]
    seen = {"epochs": 0, "restored": None, "scores": None}

    def accuracy(split, task_id, model=None):
        if seen["scores"] is None:
            seen["scores"] = sorted({v for layer in method.layers for v in layer.score.detach().unique().tolist()})
        return next(epoch_accs)

    def train_weights(task, epochs, lr, mask_lr=0.0, milestones=None, after_epoch=None, **kwargs):
        assert (epochs, lr, mask_lr, milestones) == (1, method.cfg.retrain_lr, method.cfg.retrain_mask_lr, [])
        for epoch in range(30):
            seen["epochs"] += 1
            if after_epoch(epoch):
                break

    monkeypatch.setattr(method, "accuracy", accuracy)
    monkeypatch.setattr(method, "train_weights", train_weights)
    monkeypatch.setattr(method, "snapshot", lambda: seen["epochs"])
    monkeypatch.setattr(method, "restore", lambda snap: seen.update(restored=snap))
    method.cfg.retrain_epochs = 1
    assert method.refit_picking(tasks[1], acc=0.80) == 0.75
    assert seen["scores"] == pytest.approx([method.cfg.mask_init])  # restarted at 0.01 before anything was measured
    assert seen["restored"] == 2 and seen["epochs"] == 7  # best after epoch 1 (2 epochs in); 5 stale, stop
    assert REFIT_OUTCOMES[int(method.refit_per_task[1])] == "kept an epoch"  # what metrics.json reports for it
    assert REFIT_OUTCOMES[int(method.refit_per_task[0])] == "not run"  # task 0 has no refit


def test_a_refit_that_never_beats_the_restarted_mask_leaves_the_compacted_model(monkeypatch):
    cfg, tasks, make = build(*TINY["cpg"], *COMMON)
    method = make()
    method.learn(tasks[0])
    method.begin_task(1)
    accs = iter([0.9] + [0.8] * 10)
    monkeypatch.setattr(method, "accuracy", lambda split, task_id, model=None: next(accs))
    monkeypatch.setattr(method, "train_weights", lambda *a, after_epoch=None, **k: (
        [after_epoch(e) for e in range(5)]))
    monkeypatch.setattr(method, "snapshot", lambda: "compacted")
    restored = []
    monkeypatch.setattr(method, "restore", restored.append)
    assert method.refit_picking(tasks[1], acc=0.95) == 0.95 and restored == ["compacted"]
    assert REFIT_OUTCOMES[int(method.refit_per_task[1])] == "kept nothing"


def test_the_mask_lr_keeps_going_for_a_task_without_weights_of_its_own():
    """main: stop_lr_mask = False when calculate_curr_task_ratio() == 0, so the mask lr is not zeroed at 70."""
    cfg, tasks, make = build(*TINY["cpg"], *COMMON, "method.prune_targets=[0.1]")
    method = make()
    method.begin_task(0)  # claims every weight, releases none: task 1 finds nothing free
    method.finish_task(0)
    method.begin_task(1)
    assert not method.owns_weights(1) and method.owns_weights(0)
    base, gamma = method.cfg.mask_lr, method.cfg.mask_lr_gamma
    assert method.mask_lr_at(75, base, stop=False) == pytest.approx(base * gamma)
    assert method.mask_lr_at(75, base, stop=True) == 0.0 and method.mask_lr_at(10, base) == base


def test_the_goal_model_decays_conv_and_linear_weights_only(monkeypatch):
    """The baseline script's manual weight decay: conv and linear weights of the network, not batch norms,
    biases or the classifier."""
    cfg, tasks, make = build(*CPG_MLP, *COMMON, "backbone=mlp", "backbone.hidden_sizes=[8]")
    method = make()
    captured = {}
    def fit(task, loss, params, optimizer, after_backward, model):
        return (captured.update(params=params, decay=after_backward, model=model,
                                               weight_decay=optimizer.param_groups[0]["weight_decay"]))
    monkeypatch.setattr(method.loop, "fit", fit)
    monkeypatch.setattr(method, "accuracy", lambda *a, **k: 0.5)
    method.goal_model(tasks[0])
    params = captured["params"]
    for p in params:
        p.grad = torch.zeros_like(p)
    captured["decay"]()
    decayed = [p for p in params if p.grad.abs().sum() > 0]
    assert captured["weight_decay"] == 0.0  # none through the optimiser
    assert [tuple(p.shape) for p in decayed] == [(8, 64)]  # the hidden layer's weight; not its bias, not the head
    assert torch.allclose(decayed[0].grad, method.cfg.weight_decay * decayed[0])
    # the goal model is handed to fit whole (under DDP it is wrapped, so its gradients are averaged): its parameters
    # are the ones trained
    assert [id(p) for p in captured["model"].parameters()] == [id(p) for p in params]


def test_a_new_task_starts_from_the_batch_norms_and_biases_the_task_before_ended_with():
    """manager.load_checkpoint: a task starts from the last checkpoint, its batch norms and biases included."""
    cfg, tasks, make = build(*TINY["cpg"], *COMMON, "method.prune_targets=[0.5]")
    method = make()
    method.learn(tasks[0])
    bn = next(m for m in method.backbone.modules() if isinstance(m, masked.TaskBatchNorm))
    trained = {k: v.clone() for k, v in bn.bns[0].state_dict().items()}
    assert not torch.equal(trained["running_mean"], torch.zeros_like(trained["running_mean"]))
    method.begin_task(1)
    for key, value in bn.bns[1].state_dict().items():
        assert torch.equal(value, trained[key]), key
    assert all(torch.equal(v, trained[k]) for k, v in bn.bns[0].state_dict().items())
    cfg, tasks, make = build(*CPG_MLP, *COMMON, "backbone=mlp", "backbone.hidden_sizes=[8]",
                             "method.prune_targets=[0.5]")
    method = make()
    method.learn(tasks[0])
    layer = method.layers[0]
    trained_bias = layer.biases[0].detach().clone()
    method.begin_task(1)
    assert torch.equal(layer.biases[1].detach(), trained_bias) and torch.count_nonzero(trained_bias) > 0


def test_official_initialisation_and_pytorchs_as_the_option():
    """models/vgg.py: conv kaiming_normal(fan_out, relu), linear N(0, 0.01), biases 0; heads N(0, 0.01), 0."""
    cfg, tasks, make = build(*CPG_MLP, *COMMON, "backbone=vgg16_bn", "backbone.hidden=256", "dataset.num_tasks=2")
    method = make()
    convs = [layer for layer in method.layers if layer.weight.dim() == 4]
    linears = [layer for layer in method.layers if layer.weight.dim() == 2]
    conv = convs[5]  # 128 -> 256 channels, 3×3
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / (256 * 9)), rel=0.05)
    assert all(layer.weight.std().item() == pytest.approx(0.01, rel=0.05) for layer in linears)
    assert all(torch.count_nonzero(b).item() == 0 for layer in linears for b in layer.biases)
    assert method.heads.heads[0].weight.std().item() == pytest.approx(0.01, rel=0.3)
    method.widen(1.5, 1)  # grown weights drawn the same way, over the new fan-out
    grown = convs[5].weight[256:]
    assert grown.std().item() == pytest.approx(math.sqrt(2 / (convs[5].weight.shape[0] * 9)), rel=0.1)
    cfg, tasks, make = build(*CPG_MLP, *COMMON, "backbone=mlp", "method.init=pytorch")
    plain = make().layers[0].weight
    bound = 1 / math.sqrt(plain.shape[1])  # kaiming_uniform(a=√5): U(-1/√fan_in, 1/√fan_in)
    assert plain.abs().max().item() <= bound and plain.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)


def test_packnet_drops_its_retraining_lr_at_epoch_25(monkeypatch):
    """packnet main: in the 30 retraining epochs, lr ×0.1 at epoch 25 (the training phase keeps 50/80)."""
    cfg, tasks, make = build(*TINY["packnet"], *COMMON)
    method = make()
    calls = []
    monkeypatch.setattr(method, "train_weights", lambda task, epochs, lr, **k: (calls.append(
        (epochs, lr, k.get("milestones")))))
    method.train_task(tasks[0])
    assert calls == [(2, 0.05, None), (1, 1e-3, [25])]
    assert compose_cfg("method=packnet").method.retrain_lr_milestones == [25]


def test_fit_drops_the_lr_at_its_milestones():
    cfg, tasks, make = build(*TINY["packnet"], *COMMON)
    method = make()
    lrs = []
    opt = torch.optim.SGD(method.heads.parameters(), lr=1.0)
    method.loop.fit(tasks[0], lambda b: method.loss(b, 0), params=method.heads.parameters(), epochs=3,
                               optimizer=opt, milestones=[2],
                               after_epoch=lambda e: lrs.append(opt.param_groups[0]["lr"]))
    assert lrs == [1.0, 0.1, 0.1]


def test_the_official_protocol_trains_on_everything_and_selects_on_test():
    cfg = compose_cfg("method=cpg", "method.protocol=official")
    plain = scenarios.build(cfg.dataset, cfg.data, cfg.scenario, 0, torch.device("cpu"))
    official = scenarios.build(cfg.dataset, cfg.data, cfg.scenario, 0, torch.device("cpu"), select_on_test=True)
    for t, (a, b) in enumerate(zip(plain.tasks, official.tasks)):
        assert b.val is official.test[t] and len(b.train) == len(a.train) + len(a.val)
        assert torch.equal(official.test[t].x, plain.test[t].x)


# CPG's tiny run of two tasks without goals, under the honest protocol: the report's cpg row in both tests below
HONEST = [*TINY["cpg"], *COMMON, "method.goal_source=none", "dataset.num_tasks=2"]


@pytest.fixture
def honest(tmp_path_factory, worker_id, tmp_path):
    """HONEST's run, once in the session, copied into the test's folder (as tmp_path/honest)."""
    def compute(folder):
        train(folder / "run", *HONEST)
        return str(folder / "run")
    shutil.copytree(once_per_session(tmp_path_factory, worker_id, "cpg_honest_run", compute), tmp_path / "honest")
    return tmp_path / "honest"


@pytest.mark.slow
def test_official_protocol_runs_say_so_and_are_never_averaged_with_honest_ones(tmp_path, honest):
    honest = json.loads((honest / "metrics.json").read_text())
    official = train(tmp_path / "official", *HONEST, "method.protocol=official")
    assert honest["protocol"] == "honest" and official["protocol"] == "official"
    assert official["val_acc"][-1] == official["acc"][-1]  # its selection split is the test split
    assert cl_bench("report", str(tmp_path), "--no-plots").returncode == 0
    table = (tmp_path / "report.md").read_text()
    assert "| cpg | split_digits | 2 | task | convnet | – | honest | 1 x cpu | 1 |" in table
    assert "| cpg | split_digits | 2 | task | convnet | – | official (selects on TEST) | 1 x cpu | 1 |" in table


def test_the_capacity_report_counts_weights_as_the_paper_does():
    """Two masked layers of 4×3 = 12 weights: task 0 owns 6 and released 6; task 1 took 4 of those and picks 3
    of task 0's 6."""
    cfg, tasks, make = build(*CPG_MLP, *COMMON, "backbone=mlp", "backbone.hidden_sizes=[3]", "dataset.num_tasks=2")
    method = make()
    first = method.layers[0]
    with torch.no_grad():
        first.owner.zero_()
        first.owner.view(-1)[:6] = 1
        first.owner.view(-1)[6:10] = 2
        first.register_buffer("pick_1", torch.zeros_like(first.owner, dtype=torch.bool))
        first.pick_1.view(-1)[:3] = True
        for layer in method.layers[1:]:
            layer.owner.zero_()
    method.tasks_learned.fill_(2)
    cap = method.capacity()
    total = sum(layer.weight.numel() for layer in method.layers)
    assert cap["weights_initial"] == total and cap["weights_in_use"] == 10 and cap["weights_free"] == total - 10
    assert cap["weights_in_use_per_task"] == [6, 4 + 3]
    assert cap["in_use_over_initial"] == round(10 / total, 6) and cap["params_owned_per_task"] == [6, 4]


def test_the_pae_setting_follows_the_committed_pae_script():
    """experiment1/PAE_cifar100_scratch_mul_1.5.sh as committed: growth up to 2.0, no picking."""
    method = compose_cfg("method=cpg", "dataset=cifar100_20", "setting=pae_cifar100_20").method
    assert method.picking is False and method.max_multiplier == 2.0


@pytest.mark.slow
def test_pae_runs_are_reported_apart_from_cpg(tmp_path, honest):
    assert json.loads((honest / "metrics.json").read_text())["variant"] is None
    assert train(tmp_path / "pae", *HONEST, "method.picking=false")["variant"] == "pae"
    assert cl_bench("report", str(tmp_path), "--no-plots").returncode == 0
    table = (tmp_path / "report.md").read_text()
    assert "| cpg | split_digits | 2 | task | convnet | – | honest | 1 x cpu | 1 |" in table
    assert "| cpg (pae) | split_digits | 2 | task | convnet | – | honest | 1 x cpu | 1 |" in table


def goal_fits(monkeypatch, method, accuracies):
    """Patch the goal models' training: each fit records the lr and the network's starting state, then marks the
    network with a constant of its own; accuracies are handed out in turn."""
    fits, handed = [], iter(accuracies)

    def fit(task, loss, params, optimizer, after_backward, model):
        net = params[0]  # the network's first weight: its starting values tell where it came from
        fits.append({"task": task.id, "lr": optimizer.param_groups[0]["lr"], "start": net.detach().clone()})
        with torch.no_grad():
            net.fill_(float(len(fits)))

    monkeypatch.setattr(method.loop, "fit", fit)
    monkeypatch.setattr(method, "accuracy", lambda *a, **k: next(handed))
    return fits


def test_finetune_goals_chain_from_an_earlier_tasks_goal_model(monkeypatch):
    """finetune_cifar100_normal.sh: task 1 trained fresh at 1e-2 (method.lr); task t fine-tuned at 5e-3 from the
    saved model of a task drawn by random.randint(1, t-1), i.e. any earlier task; the goal is its accuracy."""
    cfg, tasks, make = build(*CPG_MLP, *COMMON, "backbone=mlp", "backbone.hidden_sizes=[8]", "dataset.num_tasks=4",
                             "method.goal_source=finetune")
    method = make()
    fits = goal_fits(monkeypatch, method, [0.7, 0.8, 0.6, 0.9])
    goals = [method.task_goal(task) for task in tasks]
    assert goals == [0.7, 0.8, 0.6, 0.9]
    assert [f["lr"] for f in fits] == [method.cfg.lr, 5e-3, 5e-3, 5e-3]
    assert not torch.all(fits[0]["start"] == fits[0]["start"].flatten()[0])  # task 0: freshly initialised
    for t in (1, 2, 3):
        marks = {float(v) for v in fits[t]["start"].flatten()}
        assert len(marks) == 1 and 1 <= marks.pop() <= t  # the net as an earlier task's goal model ended
    # Kept in the side store (files in the run directory under train.run), not in the state: every task's but the
    # last's, which no later task draws from
    assert sorted(method.ctx.store.memory) == [(t, "cpg_goal_chain0") for t in range(3)]
    assert all(float(method.ctx.store.get(t, "cpg_goal_chain0")[0]) == t + 1 for t in range(3))
    assert not any("goal" in k and "chain" in k for k in method.state_dict())


def test_goal_repeats_keep_the_best_goal_and_all_max_the_best_of_both_sources(monkeypatch):
    """finetune_max: the best of several fine-tune chains per task; all_max: the best of scratch and finetune."""
    cfg, tasks, make = build(*CPG_MLP, *COMMON, "backbone=mlp", "backbone.hidden_sizes=[8]",
                             "method.goal_source=finetune", "method.goal_repeats=3")
    method = make()
    goal_fits(monkeypatch, method, [0.5, 0.9, 0.7])
    assert method.task_goal(tasks[0]) == 0.9
    assert sorted(method.ctx.store.memory) == [(0, f"cpg_goal_chain{c}") for c in range(3)]
    cfg, tasks, make = build(*CPG_MLP, *COMMON, "backbone=mlp", "backbone.hidden_sizes=[8]",
                             "method.goal_source=all_max")
    method = make()
    fits = goal_fits(monkeypatch, method, [0.6, 0.8, 0.9, 0.7])  # task 0: scratch, finetune; task 1: the same
    assert method.task_goal(tasks[0]) == 0.8 and method.task_goal(tasks[1]) == 0.9
    assert [f["lr"] for f in fits] == [method.cfg.lr, method.cfg.lr, method.cfg.lr, 5e-3]
    for source in ("independent", "fixed", "none"):
        cfg, tasks, make = build(*CPG_MLP, *COMMON, "backbone=mlp", f"method.goal_source={source}")
        method = make()
        goal_fits(monkeypatch, method, [0.5])
        method.task_goal(tasks[0])
        assert not method.ctx.store.memory  # only fine-tune chains keep their networks


@pytest.mark.parametrize("baseline, kept", [("restarted", 0.85), ("compacted", 0.95)])
def test_a_refit_below_the_compacted_accuracy_is_kept_only_under_the_official_baseline(monkeypatch, baseline, kept):
    """Official: history_best starts at the restarted mask's accuracy, so a refit epoch at 0.85 replaces a
    compacted model at 0.95; refit_baseline=compacted keeps the compacted model then."""
    cfg, tasks, make = build(*TINY["cpg"], *COMMON, f"method.refit_baseline={baseline}")
    method = make()
    method.learn(tasks[0])
    method.begin_task(1)
    accs = iter([0.5, 0.85] + [0.8] * 10)  # the restarted mask, then the refit's epochs
    monkeypatch.setattr(method, "accuracy", lambda split, task_id, model=None: next(accs))
    monkeypatch.setattr(method, "train_weights", lambda *a, after_epoch=None, **k: (
        [after_epoch(e) for e in range(6)]))
    snaps = iter(["compacted", "refit epoch 0"])
    monkeypatch.setattr(method, "snapshot", lambda: next(snaps))
    restored = []
    monkeypatch.setattr(method, "restore", restored.append)
    assert method.refit_picking(tasks[1], acc=0.95) == kept
    assert restored == ["refit epoch 0" if baseline == "restarted" else "compacted"]


def test_an_older_checkpoints_goal_chains_move_to_the_side_store():
    """Checkpoints written before the side store held the chains as the buffer goal_nets (repeats × tasks × size):
    loading one puts the learned tasks' networks in the store, so that its run resumes and evaluates."""
    cfg, tasks, make = build(*CPG_MLP, *COMMON, "backbone=mlp", "backbone.hidden_sizes=[8]", "dataset.num_tasks=4",
                             "method.goal_source=finetune", "method.goal_repeats=2")
    method = make()
    state = method.state_dict()
    size = sum(v.numel() for v in method.template.state_dict().values() if v.is_floating_point())
    state["goal_nets"] = torch.arange(2 * 4 * size, dtype=torch.float32).view(2, 4, size)
    state["tasks_learned"] = torch.tensor(2)
    method.load_state_dict(state)
    assert sorted(method.ctx.store.memory) == [(t, f"cpg_goal_chain{c}") for t in range(2) for c in range(2)]
    assert torch.equal(method.ctx.store.get(1, "cpg_goal_chain1"), state["goal_nets"][1, 1])


def test_the_cutoff_rule_releases_every_own_weight_at_or_under_the_ranked_magnitude():
    """utils/prune.py _pruning_mask: the magnitude at rank round(ratio x n) over the task's and the free weights
    (with the values they still hold) is the cutoff; every own weight at or under it is released (ties too), and
    nothing is zeroed there. method.prune_timing=immediate releases exactly the count, the free ones first."""
    def layer_with(values, owners):
        layer = masked.MaskedLinear(torch.nn.Linear(len(values), 1), num_tasks=2, picking=None)
        layer.weight.data = torch.tensor([values])
        layer.owner.copy_(torch.tensor([owners], dtype=torch.uint8))
        return layer

    values = [0.9, -0.05, 0.4, 0.25, -0.6, 0.5, -0.25]  # the 0.5 was released before and still holds its value
    owners = [1, 1, 1, 1, 1, 0, 1]
    official = layer_with(values, owners)
    official.release(0, 3 / 7, cutoff=True)  # ranked 3rd of 7: 0.25, so -0.05, 0.25 and -0.25 go
    assert (official.owner[0] == 0).tolist() == [False, True, False, True, False, True, True]
    assert official.weight[0].tolist() == pytest.approx(values)  # still computing until the epoch's end
    immediate = layer_with(values, owners)
    immediate.release(0, 3 / 7)  # exactly 3 free: the released 0.5 and the two smallest own weights
    assert int((immediate.owner == 0).sum()) == 3 and bool((immediate.weight[immediate.owner == 0] == 0).all())


def test_gradual_pruning_updates_masks_and_zeroes_weights_when_the_official_manager_does():
    """Manager.train: after the optimiser step of 0-based step k, gradually_prune(k) updates the masks when
    last + pruning_frequency <= k <= end (the cubic ratio at k); the released weights keep computing, frozen, until
    Manager.validate's apply_mask zeroes them at the epoch's end. 4 steps an epoch, frequency 2, a 1-epoch ramp
    from 0 to 0.5: masks after steps 3 and 5 (k = 2, 4), at ratios 0.4375 and 0.5."""
    cfg, tasks, make = build(*CPG_MLP, "backbone=mlp", "backbone.hidden_sizes=[16]", *COMMON,
                             "method.prune_epochs=2", "method.prune_ramp_epochs=1", "method.prune_frequency=2")
    method = make()
    method.begin_task(0)
    task = tasks[0]
    method.cfg.batch_size = -(-len(task.train) // 4)  # 4 steps an epoch
    assert method.loop.steps_per_epoch(task.train) == 4
    seen = {"steps": 0, "releases": [], "held": []}
    release, protect = method.release, method.protect

    def spy_release(task_id, sparsity, cutoff=False):
        seen["releases"].append((seen["steps"], round(sparsity, 6), cutoff))
        release(task_id, sparsity, cutoff)

    def spy_protect(task_id):  # after each backward: the weights free then, their values, grads and forward
        protect(task_id)
        seen["steps"] += 1
        for layer in method.layers:
            free = layer.owner == 0
            if free.any():
                assert bool((layer.weight.grad[free] == 0).all())  # frozen
                forward = layer.masked_weight(layer.weight.shape[1])
                assert torch.equal(forward[free], layer.weight.detach()[free])  # still computing
        seen["held"].append(sum(int(((layer.owner == 0) & (layer.weight != 0)).sum()) for layer in method.layers))

    method.release, method.protect = spy_release, spy_protect
    method.gradual_prune(task, 0.0, 0.5)
    assert seen["releases"] == [(3, 0.4375, True), (5, 0.5, True)]
    # nonzero free weights from the release after step 3 until epoch 0 ends, after step 5 until the phase ends
    assert [held > 0 for held in seen["held"]] == [False, False, False, True, False, True, True, True]
    for layer in method.layers:
        assert not layer.free_compute and bool((layer.weight[layer.owner == 0] == 0).all())


def test_immediate_pruning_releases_on_its_grid_and_the_ramps_end_and_zeroes_at_once():
    cfg, tasks, make = build(*CPG_MLP, "backbone=mlp", "backbone.hidden_sizes=[16]", *COMMON,
                             "method.prune_epochs=2", "method.prune_ramp_epochs=1", "method.prune_frequency=3",
                             "method.prune_timing=immediate")
    method = make()
    method.begin_task(0)
    task = tasks[0]
    method.cfg.batch_size = -(-len(task.train) // 4)
    calls = []
    release = method.release
    method.release = lambda task_id, sparsity, cutoff=False: (calls.append((round(sparsity, 6), cutoff)),
                                                               release(task_id, sparsity, cutoff))
    method.gradual_prune(task, 0.0, 0.5)
    assert calls == [(round(0.5 - 0.5 * 0.25 ** 3, 6), False), (0.5, False)]  # steps 3 and 4 (the ramp's end)
