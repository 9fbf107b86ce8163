"""The online methods (nccl, agem, lamaml): calibrated layers, the inner/outer split of NCCL's updates, the
online stream, and each method through the real CLI with a resume."""
import copy
import json
import shutil
from types import SimpleNamespace

import pytest
import torch
from conftest import contract_problems, train
from test_method_contract import trial
from torch import nn

from cl_bench import backbones, cli, config, methods
from cl_bench.data import scenarios
from cl_bench.data.scenarios import Split, Task
from cl_bench.methods.base import Batch, Context
from cl_bench.methods.memory import Memory
from cl_bench.methods.nccl import fishers
from cl_bench.nn import calibrated

SMALL = ("backbone=mlp", "backbone.hidden_sizes=[32,32]", "dataset.samples_per_task=40", "hardware=cpu")


pytestmark = pytest.mark.usefixtures("one_thread")  # batches of 10: a second thread only adds overhead


def build(*overrides, small=SMALL):
    """A method on split_digits, built in-process as train.run builds it."""
    config.register()
    cfg = config.compose(["logger=none", *small, *overrides])
    device = torch.device("cpu")
    torch.manual_seed(cfg.seed)
    scenario = scenarios.build(cfg.dataset, cfg.data, cfg.scenario, cfg.seed, device)
    recorder = SimpleNamespace(epoch_start=lambda *a: None, step=lambda: None, epoch_end=lambda *a: None)
    ctx = Context(device, None, torch.Generator().manual_seed(0), recorder)
    backbone = backbones.build(cfg.backbone, scenario.info.input_shape)
    return methods.build(cfg.method, backbone, scenario.info, ctx), scenario.tasks


@pytest.mark.parametrize("name, shape, kwargs", [("mlp", (1, 8, 8), {"hidden_sizes": [16, 16]}),
                                                ("resnet18_reduced", (3, 16, 16), {"nf": 4})])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_calibrated_network_at_init_computes_the_plain_one_exactly(name, shape, kwargs, mode):
    torch.manual_seed(0)
    plain = backbones.build({"name": name, **kwargs}, shape)
    converted = calibrated.convert(copy.deepcopy(plain), "multiply")
    assert len(calibrated.layers(converted)) == sum(isinstance(m, (nn.Linear, nn.Conv2d)) for m in plain.modules())
    x = torch.randn(6, *shape)
    plain.train(mode == "train")
    converted.train(mode == "train")
    assert torch.equal(converted(x), plain(x))


def test_calibration_shapes_and_gradient_scaling():
    conv = calibrated.Calibrated(nn.Conv2d(3, 5, 3, padding=1, bias=False), "multiply")
    linear = calibrated.Calibrated(nn.Linear(7, 4), "multiply")
    assert conv.psi.shape == (5, 3, 1, 1) and conv.lam.shape == conv.calib_bias.shape == (5, 1, 1)
    assert linear.psi.shape == (4, 1) and linear.lam.shape == linear.calib_bias.shape == (4,)
    with torch.no_grad():
        conv.psi.uniform_(0.5, 2.0)
    w = conv.calibrated_weight()
    assert torch.equal(w, conv.base.weight * conv.psi.repeat(1, 1, 3, 3))  # ψ tiled over the kernel
    x = torch.randn(2, 3, 6, 6)
    w_tilde = w.detach().requires_grad_()
    torch.nn.functional.conv2d(x, w_tilde, padding=1).sum().backward()
    conv(x).sum().backward()
    torch.testing.assert_close(conv.base.weight.grad, w_tilde.grad * conv.psi.detach())  # ψ scales θ's gradient


def test_additive_fcm_adds_the_scaled_features():
    plain = nn.Linear(5, 3)
    added = calibrated.convert(nn.Sequential(copy.deepcopy(plain)), "add")
    x = torch.randn(4, 5)
    assert torch.equal(added(x), plain(x) + plain(x))


def snapshot(params):
    return [p.detach().clone() for p in params]


def test_nccl_inner_step_moves_only_base_weights_and_outer_step_only_calibration():
    # The paper's objective: its KL term moves the calibration visibly in one step (the seed's penalty alone is
    # second order in a single step's weight change, below float resolution at β = 1).
    method, tasks = build("method=nccl", "method.inner_steps=1", "method.outer_objective=paper")
    method.learn(tasks[0])  # fills the memory with soft targets
    method.train()
    task = tasks[1]
    raw, y, t = next(task.train.batches(10))
    batch = Batch(raw, method.info.view.train(raw), y, t)
    base, calib = method.base_params, method.calibration_params
    assert {id(p) for p in base} | {id(p) for p in calib} == {id(p) for p in method.parameters()}
    before = [layer.calibrated_weight().detach() for layer in method.layers]

    base0, calib0 = snapshot(base), snapshot(calib)
    method.glance(batch, task)
    assert all(torch.equal(a, b) for a, b in zip(calib0, calib))
    assert any(not torch.equal(a, b) for a, b in zip(base0, base))

    base1, calib1 = snapshot(base), snapshot(calib)
    method.outer_step(task, before, method.pool(task))
    assert all(torch.equal(a, b) for a, b in zip(base1, base))
    assert any(not torch.equal(a, b) for a, b in zip(calib1, calib))
    moved_psi = [not torch.equal(torch.ones_like(layer.psi), layer.psi) for layer in method.layers]
    assert any(moved_psi)


def test_fisher_is_the_calibrated_weights_squared_gradient():
    layer = calibrated.Calibrated(nn.Linear(6, 3), "multiply")
    with torch.no_grad():
        layer.psi.uniform_(0.5, 2.0)
    x = torch.randn(4, 6)
    w_tilde = layer.calibrated_weight().detach().requires_grad_()
    torch.nn.functional.linear(x, w_tilde, layer.base.bias).pow(2).sum().backward()
    layer(x).pow(2).sum().backward()
    torch.testing.assert_close(fishers([layer.base.weight.grad], [layer.psi])[0], w_tilde.grad.pow(2))


def test_stream_visits_every_sample_once_per_glance_cycle():
    method, _ = build("method=agem", "method.inner_steps=3", "method.batch_size=7")
    n = 45
    split = Split(torch.randint(0, 255, (n, 1, 8, 8), dtype=torch.uint8), torch.arange(n) % 2,
                  torch.zeros(n, dtype=torch.long))
    split.y = torch.arange(n)  # sample ids stand in for labels: glance is replaced below
    task = Task(0, [0, 1], 0, split, split)
    seen = []

    def glance(batch, task):
        seen.append(batch.y.clone())
        return torch.zeros(())

    method.glance = glance
    method.learn(task)
    cycles = [seen[i: i + 3] for i in range(0, len(seen), 3)]
    assert len(cycles) == -(-n // 7)
    assert all(torch.equal(c[0], c[1]) and torch.equal(c[0], c[2]) for c in cycles)  # the same batch, 3 glances
    assert sorted(torch.cat([c[0] for c in cycles]).tolist()) == list(range(n))  # each sample once


@pytest.mark.parametrize("policy", ["reservoir", "ring"])
def test_memory_samples_only_earlier_tasks_when_asked(policy):
    mem = Memory(12, (1, 2, 2), 4, torch.device("cpu"), policy, num_tasks=3)
    g = torch.Generator().manual_seed(0)
    for task in range(3):
        for _ in range(3):
            y = torch.randint(0, 4, (5,))
            mem.add(torch.zeros(5, 1, 2, 2, dtype=torch.uint8), y, torch.full((5,), task), generator=g)
        _, _, t, _ = mem.sample(200, g, before_task=task)
        assert (t < task).all() if task > 0 else (t == 0).all()
    if policy == "ring":  # 4 slots per task, each holding its task's newest samples
        assert torch.equal(mem.t[:12], torch.arange(3).repeat_interleave(4))
        assert mem.valid()[:12].all() and not mem.valid()[12]


def test_online_methods_refuse_knobs_they_do_not_read():
    config.register()
    cfg = config.compose(["method=nccl", "method.lr=0.5"])
    with pytest.raises(methods.UserError, match="method.lr=0.5 is out of range: use 0.01: nccl runs the online "
                                                "protocol .* does not read it"):
        config.validate(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("method, extra", [("nccl", None), ("agem", None), ("lamaml", ("method.inner_steps=1",))])
def test_method_runs_through_the_cli_and_resumes_exactly(tmp_path_factory, worker_id, tmp_path, method, extra):
    """The uninterrupted run: the method's trial (test_method_contract.py: two tasks of 40 samples, every
    checkpoint kept) where it has no extra options (issue 74), else five tasks of SMALL through the CLI."""
    run = tmp_path / "run"
    if extra is None:
        run_of_trial = trial(tmp_path_factory, worker_id, method, "task")
        shutil.copytree(run_of_trial["run_dir"], run)
        full = run_of_trial["metrics"]
    else:
        full = train(run, f"method={method}", *SMALL, *extra)
    assert contract_problems(run) == []
    assert full["complete"] and full["avg_acc"] > 0.5

    resumed, middle = tmp_path / "resumed", (full["num_tasks"] - 1) // 2  # as if killed right after the middle task
    shutil.copytree(run, resumed)
    for t in range(middle + 1, full["num_tasks"]):
        shutil.rmtree(resumed / "checkpoints" / f"task_{t:03d}")
    (resumed / "checkpoints" / "last").write_text(f"task_{middle:03d}")
    (resumed / "metrics.json").unlink()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:  # `cl-bench train resume=...` in this process: the same entry point, without a second start-up
        assert cli.main(["train", f"hydra.run.dir={resumed}", "logger=none", f"resume={resumed}"]) == 0
    finally:
        torch.set_num_threads(threads)
    again = json.loads((resumed / "metrics.json").read_text())
    drop = ("time_s", "peak_mem_mb")
    assert {k: v for k, v in again.items() if k not in drop} == {k: v for k, v in full.items() if k not in drop}
