"""gated (Abati et al. 2020): the straight-through gates, freezing and re-initialisation on known kernels, the
task-scenario invariant, the batched multi-task path on every conv backbone, and both scenarios and a resume
through the real CLI."""
import json
import shutil

import pytest
import torch
from conftest import cl_bench, contract_problems, once_per_session, train
from omegaconf import OmegaConf
from safetensors.torch import load_file
from test_method_contract import trial

from cl_bench import backbones, methods
from cl_bench.config import DataConfig, DatasetConfig
from cl_bench.data import scenarios
from cl_bench.errors import UserError
from cl_bench.methods.base import Batch
from cl_bench.methods.gated import GatedConfig
from cl_bench.methods.memory import Memory
from cl_bench.nn import gated
from cl_bench.recorders import Recorders

# Three tasks of three digits each keep the CLI runs short.
SMALL = ("method=gated", "dataset.num_tasks=3", "backbone.channels=[8,16]", "method.epochs=1", "method.lr=0.01",
         "method.memory_size=50")


pytestmark = pytest.mark.usefixtures("one_thread")


def build(scenario="task", **cfg):
    torch.manual_seed(0)
    dataset = OmegaConf.structured(DatasetConfig(name="split_digits", source="digits", num_tasks=5))
    data = OmegaConf.structured(DataConfig(root="data", eval_batch_size=1000))
    sc = scenarios.build(dataset, data, scenario, 0, torch.device("cpu"))
    ctx = methods.Context(torch.device("cpu"), None, torch.Generator().manual_seed(0), Recorders([]))
    backbone = backbones.build(OmegaConf.create({"name": "convnet", "channels": [8, 16]}), sc.info.input_shape)
    return methods.build(OmegaConf.structured(GatedConfig(**cfg)), backbone, sc.info, ctx), sc.tasks


@pytest.mark.parametrize("noise, mean, open_share", [("logistic", 0.0, 0.5), ("gumbel", 0.5772, 1 - 1 / 2.71828)])
def test_gate_noise_is_the_named_distribution(noise, mean, open_share):
    """At logit 0, a gate opens with P(noise > 0): 1/2 for the binary Gumbel-softmax's logistic noise, 1 - 1/e for
    cgate's one Gumbel draw (whose mean is Euler's constant)."""
    torch.manual_seed(0)
    logits = torch.zeros(1_000_000)
    draws = gated.GATE_NOISES[noise](logits)
    assert draws.mean().item() == pytest.approx(mean, abs=0.01)
    assert gated.gumbel_sigmoid(logits, 2 / 3, noise).mean().item() == pytest.approx(open_share, abs=0.01)


def test_gate_noise_option_reaches_every_unit():
    info = scenarios.Info("toy", "task", (1, 8, 8), [[0, 1], [2, 3]], [0, 2], None)
    cfg = GatedConfig(gate_noise="gumbel")
    method = methods.build(OmegaConf.structured(cfg), backbones.build(
        OmegaConf.structured(backbones.BACKBONES["convnet"][1](channels=[4, 4])), (1, 8, 8)), info,
        methods.Context(torch.device("cpu"), None, torch.Generator(), Recorders([])))
    assert {unit.noise for unit in method.layers} == {"gumbel"}


def test_gumbel_sigmoid_is_hard_forward_and_soft_backward():
    logits = torch.randn(256, 32, requires_grad=True)
    torch.manual_seed(1)
    hard = gated.gumbel_sigmoid(logits, 2 / 3)
    torch.manual_seed(1)
    soft = torch.sigmoid((logits + gated.logistic_noise(logits)) / (2 / 3))
    assert set(hard.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(hard, (soft > 0.5).float())
    weight = torch.randn(256, 32)
    (grad_hard,) = torch.autograd.grad((hard * weight).sum(), logits)
    (grad_soft,) = torch.autograd.grad((soft * weight).sum(), logits)
    assert torch.equal(grad_hard, grad_soft)


def open_only(layer, task_id, kernels):
    """Make task_id's gates fire for these kernels on every input and never for the others."""
    fc2 = layer.gates[task_id].fc2
    with torch.no_grad():
        fc2.weight.zero_()
        fc2.bias.fill_(-10.0)
        fc2.bias[kernels] = 10.0


def test_freezing_and_reinitialisation_on_known_kernels():
    method, tasks = build(freeze_threshold=0.5)
    known = [[0, 2, 5], [1, 2, 9, 15]]
    for layer, kernels in zip(method.layers, known):
        open_only(layer, 0, kernels)
    before = [layer.convs[0].weight.detach().clone() for layer in method.layers]
    method._consolidate(tasks[0])
    for layer, kernels, w in zip(method.layers, known, before):
        want = torch.zeros(layer.out_channels, dtype=torch.bool)
        want[kernels] = True
        assert torch.equal(layer.frozen, want) and torch.equal(layer.usable[0], want)
        assert torch.equal(layer.convs[0].weight[want], w[want])
        assert all(not torch.equal(a, b) for a, b in zip(layer.convs[0].weight[~want], w[~want]))
    assert method.active[0].tolist() == [3.0, 4.0]  # the evaluation gates: a positive logit fires

    # Task 1 fires kernel 1 of the first layer besides a frozen one: the union is frozen, old rows stay put.
    open_only(method.layers[0], 1, [1, 2])
    open_only(method.layers[1], 1, [2])
    frozen_rows = method.layers[0].convs[0].weight[method.layers[0].frozen].clone()
    method._consolidate(tasks[1])
    assert method.layers[0].frozen.nonzero().flatten().tolist() == [0, 1, 2, 5]
    assert torch.equal(method.layers[0].convs[0].weight[[0, 2, 5]], frozen_rows)
    assert torch.equal(method.layers[0].usable[0], torch.isin(torch.arange(8), torch.tensor([0, 2, 5])))


def test_task_scenario_keeps_old_tasks_bit_for_bit():
    # SGD with momentum and weight decay: both would move frozen kernels if they were not guarded.
    method, tasks = build(epochs=1, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=1e-3,
                          freeze_threshold=0.5, gate_open_bias=0.0)
    logits, frozen = {}, []  # frozen: (layer, kernels, their weights) after each task
    for task in tasks[:3]:
        free = [~layer.frozen.clone() for layer in method.layers]
        before = [layer.convs[0].weight.detach().clone() for layer in method.layers]
        method.learn(task)
        assert any(not torch.equal(layer.convs[0].weight[f], w[f]) for layer, f, w in zip(method.layers, free, before))
        assert not all(layer.frozen.all() for layer in method.layers)  # capacity is left, so the test bites
        method.eval()
        with torch.no_grad():
            for old in tasks[: task.id]:
                assert torch.equal(method.predict(method.info.view.eval(old.val.x), old.id), logits[old.id])
            logits[task.id] = method.predict(method.info.view.eval(task.val.x), task.id)
        for layer, kernels, w in frozen:
            assert torch.equal(layer.convs[0].weight[kernels], w)
        frozen += [(layer, layer.frozen.clone(), layer.convs[0].weight[layer.frozen].clone())
                   for layer in method.layers]


@pytest.mark.parametrize("name,options,units", [("convnet", {"channels": [8, 16]}, 2),
                                                ("resnet18_reduced", {"nf": 4}, 17), ("resnet18", {"nf": 4}, 17),
                                                ("vgg16_bn", {"hidden": 32}, 13)])
def test_stacked_paths_match_single_paths_on_every_conv_backbone(name, options, units):
    torch.manual_seed(0)
    backbone = backbones.build(OmegaConf.create({"name": name, **options}), (3, 32, 32))
    layers = gated.convert(backbone, num_tasks=2)
    modules = gated.routed(backbone)
    assert len(layers) == units
    x = torch.randn(6, 3, 32, 32)
    backbone.train()
    gated.route(modules, [1])
    backbone(x).sum().backward()  # a training step's forward on task 1, which also moves its batch norms
    backbone.eval()
    with torch.no_grad():
        single = [gated.route(modules, [t]) or backbone(x) for t in (0, 1)]
        gated.route(modules, [0, 1])
        stacked = backbone(x.repeat(2, 1, 1, 1))
        first = layers[0]  # and one unit against its modules: conv, batch norm, ReLU, gate thresholded at 0
        conv, norm = first.body[0], first.body[1]
        reference = torch.cat([torch.relu(norm.bns[t](conv(x))) * (first.gates[t](x) > 0)[:, :, None, None]
                               for t in (0, 1)])
        layer_out = first(x.repeat(2, 1, 1, 1))
    torch.testing.assert_close(stacked, torch.cat(single), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(layer_out, reference, rtol=1e-4, atol=1e-5)


def test_convert_refuses_a_backbone_without_convs():
    with pytest.raises(UserError, match="conv backbone"):
        gated.convert(backbones.build(OmegaConf.create({"name": "mlp", "hidden_sizes": [8]}), (1, 8, 8)), 2)


@pytest.mark.slow  # gated's trial in the task scenario (test_method_contract.py, which checks its contract)
def test_task_scenario_forgets_nothing_and_reports_every_conv_layer(tmp_path_factory, worker_id):
    m = trial(tmp_path_factory, worker_id, "gated", "task")["metrics"]
    assert m["forgetting"] == 0.0 and m["bwt"] == 0.0
    convs = {name for name, module in backbones.build(OmegaConf.create({"name": "convnet"}), (1, 8, 8)).named_modules()
             if isinstance(module, torch.nn.Conv2d)}  # the trial's backbone: the convnet at its defaults
    cap = m["capacity"]
    assert set(cap["frozen_fraction"]) == convs and len(cap["flops_per_sample"]) == m["num_tasks"]
    assert all(0 < f <= cap["flops_dense_per_sample"] for f in cap["flops_per_sample"])


@pytest.fixture
def class_run(tmp_path_factory, worker_id, tmp_path):
    """SMALL's class-scenario run with every task's checkpoint, run once in the session and copied into each test
    that reads it."""
    def compute(folder):
        train(folder / "run", *SMALL, "scenario=class")
        return str(folder / "run")
    shutil.copytree(once_per_session(tmp_path_factory, worker_id, "gated_small_class_run", compute), tmp_path / "whole")
    return tmp_path / "whole"


def metrics_of(run_dir) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.mark.slow
def test_class_scenario_through_the_cli_and_resume(class_run, tmp_path):
    whole, resumed = class_run, tmp_path / "resumed"
    m = metrics_of(whole)
    assert contract_problems(whole) == []
    assert len(m["capacity"]["val_task_accuracy"]) == 3 and m["capacity"]["inference_flops_per_sample"] > 0
    meta = json.loads((whole / "checkpoints" / "task_002" / "meta.json").read_text())
    assert any(k.endswith(".frozen") for k in meta["bits"]) and any(k.endswith(".usable") for k in meta["bits"])

    # Interrupt after the second task: drop the last checkpoint and continue from task_001.
    shutil.copytree(whole, resumed)
    shutil.rmtree(resumed / "checkpoints" / "task_002")
    (resumed / "checkpoints" / "last").write_text("task_001")
    (resumed / "metrics.json").unlink()  # a resume of a complete run changes nothing
    again = train(resumed, f"resume={resumed}")
    for key in ("time_s", "peak_mem_mb"):
        m.pop(key), again.pop(key)
    assert again == m
    for f in ("state.safetensors", "masks.safetensors"):
        a, b = (load_file(d / "checkpoints" / "task_002" / f) for d in (whole, resumed))
        assert a.keys() == b.keys() and all(torch.equal(read(a, k), read(b, k)) for k in a)


@pytest.mark.slow
def test_eval_of_a_class_run_predicts_as_the_run_did(class_run):
    """cl-bench eval rebuilds the model from the last checkpoint: every learned task's path runs again."""
    run_dir = class_run
    m = metrics_of(run_dir)
    proc = cl_bench("eval", str(run_dir))
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads((run_dir / "eval.json").read_text())
    assert again["acc"] == m["acc"][-1] and again["task_prediction_acc"] == m["task_prediction_acc"][-1]
    assert again["task_confusion"] == m["task_confusion"]


def read(state, key):
    # The memory's spare last row soaks up the samples the reservoir drops, in any order; it is never read.
    return state[key][:-1] if key == "memory.x" else state[key]


# --- the paper's class-scenario training (joint objective, balanced memory) and gate placement ----------------

def test_the_task_classifier_loss_reaches_the_current_path_and_not_the_earlier_ones():
    method, tasks = build("class", epochs=1, memory_size=60)
    method.learn(tasks[0])
    method.train()
    method.zero_grad(set_to_none=True)  # task 0's last step left its gradients
    raw, y, t = tasks[1].train.x[:8], tasks[1].train.y[:8], tasks[1].train.t[:8]
    method.task_loss(Batch(raw, method.info.view.train(raw), y, t), 1).backward()
    for layer in method.layers:
        assert layer.gates[1].fc1.weight.grad.abs().sum() > 0  # the current task's gates
        assert layer.gates[0].fc1.weight.grad is None  # task 0's path is settled: no gradient reaches it
        free = ~layer.frozen
        assert free.any() and layer.convs[0].weight.grad[free].abs().sum() > 0  # the shared, unfrozen kernels
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in method.task_classifier.parameters())
    assert all(norm.bns[1].weight.grad is not None for norm in method.norms)


def test_joint_objective_trains_the_task_classifier_with_the_task():
    method, tasks = build("class", epochs=1, memory_size=60)
    method.learn(tasks[0])
    before = [p.detach().clone() for p in method.task_classifier.parameters()]
    calls = []
    # the post-hoc fit must not run
    method._fit_task_classifier = lambda task, epochs: calls.append(task.id)
    method.learn(tasks[1])
    assert calls == []
    assert all(not torch.equal(a, p) for a, p in zip(before, method.task_classifier.parameters()))


def test_memory_keeps_c_over_t_per_task_and_rehearsal_draws_uniform_task_labels():
    method, tasks = build("class", epochs=1, memory_size=60)
    memory = method.memory
    for task in tasks[:4]:
        method.learn(task)
        seen = task.id + 1
        assert torch.bincount(memory.t[memory.valid()], minlength=seen).tolist() == [60 // seen] * seen
    _, _, t = memory.sample_uniform_tasks(8000, torch.Generator().manual_seed(3))
    counts = torch.bincount(t, minlength=4).float()
    chi_square = ((counts - 2000) ** 2 / 2000).sum().item()
    assert chi_square < 16.27  # the 0.999 quantile of chi-square with 3 degrees of freedom


def test_uniform_task_draws_hold_when_a_task_keeps_fewer_samples_than_its_share():
    memory = Memory(90, (1, 2, 2), 6, torch.device("cpu"), "balanced", num_tasks=3)
    for task, n in enumerate((50, 5, 50)):  # task 1 has 5 samples for a share of 30
        x = torch.full((n, 1, 2, 2), task, dtype=torch.uint8)
        memory.add_task(x, torch.full((n,), 2 * task), torch.full((n,), task), torch.Generator().manual_seed(task))
    raw, _, t = memory.sample_uniform_tasks(9000, torch.Generator().manual_seed(0))
    counts = torch.bincount(t, minlength=3).float()
    assert ((counts - 3000) ** 2 / 3000).sum().item() < 13.82  # chi-square, 2 degrees of freedom, 0.999
    assert torch.equal(raw[:, 0, 0, 0].long(), t)  # every draw is a stored sample of its task


def test_threshold_zero_freezes_a_kernel_that_fired_for_one_validation_sample():
    assert GatedConfig().freeze_threshold == 0.0
    method, tasks = build()
    n = len(tasks[0].val)
    one_sample = [torch.zeros(layer.out_channels) for layer in method.layers]
    for relevance in one_sample:
        relevance[3] = 1 / n
    method._firing = lambda data, task_id: one_sample
    method._consolidate(tasks[0])
    for layer in method.layers:
        assert layer.frozen.nonzero().flatten().tolist() == [3]


def test_resnet18_gates_stand_where_the_paper_puts_them():
    backbone = backbones.build(OmegaConf.create({"name": "resnet18", "nf": 4}), (3, 32, 32))
    blocks = [(n, m) for n, m in backbone.named_modules() if type(m).__name__ == "BasicBlock"]
    convs = {id(m): n for n, m in backbone.named_modules() if isinstance(m, torch.nn.Conv2d)}
    gated.convert(backbone, num_tasks=2)
    units = {n: [convs[id(c)] for c in m.convs] for n, m in backbone.named_modules() if isinstance(m, gated.GatedUnit)}
    want = {"stem.0": ["stem.0"]}
    for name, block in blocks:  # one gate after ReLU(BN1), one after ReLU(residual sum) owning conv2 and shortcut
        want[f"{name}.body.conv1"] = [f"{name}.conv1"]
        want[name] = [f"{name}.conv2", *([f"{name}.shortcut.0"] if len(block.shortcut) else [])]
    assert units == want and len(units) == 17
    assert sum(1 for name in want if any("shortcut" in c for c in want[name])) == 3  # shortcuts: gated by the sum
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in backbone.modules()
                   if not any(m is bn for norm in gated.norms_of(backbone) for bn in norm.bns))
    block = backbone.layers[2]  # a block's gate reads the block's input: 4 channels in, 8 out
    assert block.gates[0].fc1.in_features == 4 and block.gates[0].fc2.out_features == 8


def test_reports_list_the_post_hoc_task_classifier_apart():
    assert build("class")[0].variant() is None
    assert build("class", task_classifier_fit="after_task")[0].variant() == "after_task"
    assert build("task", task_classifier_fit="after_task")[0].variant() is None  # no task classifier there


# --- class scenario: task-prediction diagnostics and the joint objective's options (issue 29) -------------------

@pytest.mark.slow
def test_class_runs_record_task_prediction_and_the_offline_bound_leaves_learning_alone(class_run, tmp_path):
    plain = metrics_of(class_run)
    bound = train(tmp_path / "bound", *SMALL, "scenario=class", "method.offline_bound_epochs=3")
    assert bound["acc"] == plain["acc"] and bound["task_prediction_acc"] == plain["task_prediction_acc"]
    offline = bound["capacity"]["val_task_accuracy_offline"]
    assert [len(row) for row in offline] == [1, 2, 3] and offline[0] == [1.0]  # one task: nothing to confuse
    assert all(0 <= a <= 1 for row in offline for a in row) and "val_task_accuracy_offline" not in plain["capacity"]
    rows, confusion = plain["task_prediction_acc"], plain["task_confusion"]
    assert [len(r) for r in rows] == [1, 2, 3] and rows[0] == [1.0]
    assert [len(r) for r in confusion] == [3, 3, 3]
    assert all(abs(sum(r) - 1) < 1e-9 for r in confusion) and [confusion[j][j] for j in range(3)] == rows[-1]
    # A class is right only where its task was named: the class logits are -inf outside the predicted task.
    assert all(a <= p + 1e-12 for acc, pred in zip(plain["acc"], rows) for a, p in zip(acc, pred))
    assert plain["task_prediction_avg_acc"] == sum(rows[-1]) / 3


@pytest.mark.slow  # ER's trial (test_method_contract.py)
def test_methods_that_infer_no_task_record_no_task_prediction(tmp_path_factory, worker_id):
    m = trial(tmp_path_factory, worker_id, "er", "class")["metrics"]
    assert "task_prediction_acc" not in m and "task_confusion" not in m


def _first_task_learned(**cfg):
    method, tasks = build("class", epochs=1, memory_size=60, **cfg)
    method.learn(tasks[0])
    method.memory.add_task(tasks[0].train.x, tasks[0].train.y, tasks[0].train.t, torch.Generator().manual_seed(0))
    for layer in method.layers:
        layer.start_task()
    raw, y, t = tasks[1].train.x[:16], tasks[1].train.y[:16], tasks[1].train.t[:16]
    return method, Batch(raw, method.info.view.train(raw), y, t)


def test_hard_task_loss_gates_show_the_classifier_the_path_evaluation_runs():
    method, batch = _first_task_learned(task_loss_gates="hard")
    method.train()
    gated.route(method.routed, [1], norm="running", hard=True)
    trained = method.backbone(batch.x)
    method.eval()
    gated.route(method.routed, [1])  # task 1 not learned yet: every kernel usable, as while it trains
    evaluated = method.backbone(batch.x)
    assert torch.allclose(trained, evaluated, atol=1e-5)
    method.train()
    gated.route(method.routed, [1], norm="running")  # the Gumbel samples differ from evaluation's gates
    assert not torch.allclose(method.backbone(batch.x), evaluated, atol=1e-3)


def test_task_loss_norm_batch_reads_the_batch_and_leaves_running_statistics():
    method, batch = _first_task_learned(task_loss_norm="batch")
    stats = [(n.bns[1].running_mean.clone(), n.bns[1].running_var.clone()) for n in method.norms]
    method.train()
    method.task_loss(batch, 1)
    assert all(torch.equal(n.bns[1].running_mean, m) and torch.equal(n.bns[1].running_var, v)
               for n, (m, v) in zip(method.norms, stats))
    gated.route(method.routed, [1])  # plain training moves them
    method.backbone(batch.x)
    assert not torch.equal(method.norms[0].bns[1].running_mean, stats[0][0])


def test_task_loss_weighs_the_current_batch_as_told():
    """With the current batch's share 1, the rehearsal batch drawn cannot change the loss; by default (1/(t+1))
    it does."""
    for share, same in ((1.0, True), (None, False)):
        method, batch = _first_task_learned(task_loss_gates="hard", task_loss_current_weight=share)
        method.train()
        losses = []
        for seed in (1, 2):
            method.ctx.generator.manual_seed(seed)
            losses.append(method.task_loss(batch, 1).item())
        assert (abs(losses[0] - losses[1]) < 1e-6) == same


def test_the_task_classifier_learning_rate_and_refit_are_read():
    slow, tasks = build("class", epochs=1, memory_size=60, task_classifier_lr=1e-9)
    slow.learn(tasks[0])
    before = [p.detach().clone() for p in slow.task_classifier.parameters()]
    slow.learn(tasks[1])
    assert all(torch.allclose(a, p, atol=1e-6) for a, p in zip(before, slow.task_classifier.parameters()))
    refit, tasks = build("class", epochs=1, memory_size=60, task_classifier_refit_epochs=2)
    calls = []
    refit._fit_task_classifier = lambda task, epochs: calls.append((task.id, epochs))
    refit.learn(tasks[0])
    refit.learn(tasks[1])
    assert calls == [(0, 2), (1, 2)]


def test_options_of_the_other_task_classifier_fit_are_refused():
    with pytest.raises(UserError, match="task_loss_gates"):
        GatedConfig(task_classifier_fit="after_task", task_loss_gates="hard")
    with pytest.raises(UserError, match="task_classifier_epochs"):
        GatedConfig(task_classifier_epochs=3)


def test_the_task_classifier_reads_each_paths_pooled_final_features_as_the_paper():
    """Abati et al. 2020, section 3.3: h = ⊕_i μ(ĥ_i), the global average pool of each seen task's final feature map
    (the features its head reads), concatenated over the paths, into an MLP of one hidden layer of 64 ReLU units."""
    method, tasks = build("class", epochs=1, memory_size=60)
    for task in tasks[:2]:
        method.learn(task)
    method.eval()
    x = method.info.view.eval(tasks[0].val.x[:5], tasks[0].val.t[:5])
    maps, read = [], []
    last_pool = next(m for m in reversed(method.backbone.body) if isinstance(m, torch.nn.MaxPool2d))
    hooks = [last_pool.register_forward_hook(lambda m, i, o: maps.append(o)),
             method.task_classifier[0].register_forward_hook(lambda m, i, o: read.append(i[0]))]
    method.predict(x, None)
    for hook in hooks:
        hook.remove()
    pooled = maps[0].mean((2, 3)).view(2, 5, -1)  # the two paths' final maps, globally averaged
    expected = torch.cat([pooled[0], pooled[1], torch.zeros(5, (5 - 2) * pooled.shape[2])], dim=1)
    assert torch.allclose(read[0], expected, atol=1e-6)
    assert [m.out_features for m in method.task_classifier if isinstance(m, torch.nn.Linear)] == [64, 5]
    assert any(isinstance(m, torch.nn.ReLU) for m in method.task_classifier)
