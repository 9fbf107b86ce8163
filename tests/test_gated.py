"""gated (Abati et al. 2020): the straight-through gates, freezing and re-initialisation on known kernels, the
task-scenario invariant, the batched multi-task path on every conv backbone, and both scenarios and a resume
through the real CLI."""
import json
import shutil

import pytest
import torch
from conftest import contract_problems, train
from omegaconf import OmegaConf
from safetensors.torch import load_file

from cl_bench import backbones, methods
from cl_bench.config import DatasetConfig
from cl_bench.data import scenarios
from cl_bench.errors import UserError
from cl_bench.methods.gated import GatedConfig
from cl_bench.nn import gated
from cl_bench.recorders import Recorders

# Three tasks of three digits each keep the CLI runs short.
SMALL = ("method=gated", "dataset.num_tasks=3", "backbone.channels=[8,16]", "method.epochs=1", "method.lr=0.01",
         "method.task_classifier_epochs=1", "method.memory_size=50")


pytestmark = pytest.mark.usefixtures("one_thread")


def build(scenario="task", **cfg):
    torch.manual_seed(0)
    dataset = OmegaConf.structured(DatasetConfig(name="split_digits", source="digits", num_tasks=5))
    data = OmegaConf.create({"root": "data", "download": False, "cache": True, "val_fraction": 0.1,
                             "eval_batch_size": 1000})
    sc = scenarios.build(dataset, data, scenario, 0, torch.device("cpu"))
    ctx = methods.Context(torch.device("cpu"), None, torch.Generator().manual_seed(0), Recorders([]))
    backbone = backbones.build(OmegaConf.create({"name": "convnet", "channels": [8, 16]}), sc.info.input_shape)
    return methods.build(OmegaConf.structured(GatedConfig(**cfg)), backbone, sc.info, ctx), sc.tasks


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
    before = [layer.conv.weight.detach().clone() for layer in method.layers]
    method._consolidate(tasks[0])
    for layer, kernels, w in zip(method.layers, known, before):
        want = torch.zeros(layer.conv.out_channels, dtype=torch.bool)
        want[kernels] = True
        assert torch.equal(layer.frozen, want) and torch.equal(layer.usable[0], want)
        assert torch.equal(layer.conv.weight[want], w[want])
        assert all(not torch.equal(a, b) for a, b in zip(layer.conv.weight[~want], w[~want]))
    assert method.active[0].tolist() == [3.0, 4.0]  # the evaluation gates: a positive logit fires

    # Task 1 fires kernel 1 of the first layer besides a frozen one: the union is frozen, old rows stay put.
    open_only(method.layers[0], 1, [1, 2])
    open_only(method.layers[1], 1, [2])
    frozen_rows = method.layers[0].conv.weight[method.layers[0].frozen].clone()
    method._consolidate(tasks[1])
    assert method.layers[0].frozen.nonzero().flatten().tolist() == [0, 1, 2, 5]
    assert torch.equal(method.layers[0].conv.weight[[0, 2, 5]], frozen_rows)
    assert torch.equal(method.layers[0].usable[0], torch.isin(torch.arange(8), torch.tensor([0, 2, 5])))


def test_task_scenario_keeps_old_tasks_bit_for_bit():
    # SGD with momentum and weight decay: both would move frozen kernels if they were not guarded.
    method, tasks = build(epochs=1, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=1e-3,
                          freeze_threshold=0.5, gate_open_bias=0.0)
    logits, frozen = {}, []  # frozen: (layer, kernels, their weights) after each task
    for task in tasks[:3]:
        free = [~layer.frozen.clone() for layer in method.layers]
        before = [layer.conv.weight.detach().clone() for layer in method.layers]
        method.learn(task)
        assert any(not torch.equal(layer.conv.weight[f], w[f]) for layer, f, w in zip(method.layers, free, before))
        assert not all(layer.frozen.all() for layer in method.layers)  # capacity is left, so the test bites
        method.eval()
        with torch.no_grad():
            for old in tasks[: task.id]:
                assert torch.equal(method.predict(method.info.view.eval(old.val.x), old.id), logits[old.id])
            logits[task.id] = method.predict(method.info.view.eval(task.val.x), task.id)
        for layer, kernels, w in frozen:
            assert torch.equal(layer.conv.weight[kernels], w)
        frozen += [(layer, layer.frozen.clone(), layer.conv.weight[layer.frozen].clone()) for layer in method.layers]


@pytest.mark.parametrize("name,options", [("convnet", {"channels": [8, 16]}), ("resnet18_reduced", {"nf": 4}),
                                          ("resnet18", {"nf": 4}), ("vgg16_bn", {"hidden": 32})])
def test_stacked_paths_match_single_paths_on_every_conv_backbone(name, options):
    torch.manual_seed(0)
    backbone = backbones.build(OmegaConf.create({"name": name, **options}), (3, 32, 32))
    convs = sum(isinstance(m, torch.nn.Conv2d) for m in backbone.modules())
    layers = gated.convert(backbone, num_tasks=2)
    assert len(layers) == convs
    x = torch.randn(6, 3, 32, 32)
    backbone.train()
    gated.route(layers, [1])
    backbone(x).sum().backward()  # a training step's forward on task 1, which also moves its batch norms
    backbone.eval()
    with torch.no_grad():
        single = [gated.route(layers, [t]) or backbone(x) for t in (0, 1)]
        gated.route(layers, [0, 1])
        stacked = backbone(x.repeat(2, 1, 1, 1))
        first = layers[0]  # and one layer against its modules: batch norm, gate with a hard threshold at 0
        reference = torch.cat([first.bns[t](first.conv(x)) * (first.gates[t](x) > 0)[:, :, None, None] for t in (0, 1)])
        layer_out = first(x.repeat(2, 1, 1, 1))
    torch.testing.assert_close(stacked, torch.cat(single), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(layer_out, reference, rtol=1e-4, atol=1e-5)


def test_convert_refuses_a_backbone_without_convs():
    with pytest.raises(UserError, match="conv backbone"):
        gated.convert(backbones.build(OmegaConf.create({"name": "mlp", "hidden_sizes": [8]}), (1, 8, 8)), 2)


def test_task_scenario_through_the_cli(run_dir):
    m = train(run_dir, *SMALL)
    assert contract_problems(run_dir) == []
    assert m["forgetting"] == 0.0 and m["bwt"] == 0.0
    cap = m["capacity"]
    assert set(cap["frozen_fraction"]) == {"body.0", "body.4"} and len(cap["flops_per_sample"]) == 3
    assert all(0 < f <= cap["flops_dense_per_sample"] for f in cap["flops_per_sample"])


def test_class_scenario_through_the_cli_and_resume(tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    m = train(whole, *SMALL, "scenario=class")
    assert contract_problems(whole) == []
    assert len(m["capacity"]["val_task_accuracy"]) == 3 and m["capacity"]["inference_flops_per_sample"] > 0
    meta = json.loads((whole / "checkpoints" / "task_002" / "meta.json").read_text())
    assert any(k.endswith(".frozen") for k in meta["bits"]) and any(k.endswith(".usable") for k in meta["bits"])

    # Interrupt after the second task: drop the last checkpoint and continue from task_001.
    shutil.copytree(whole, resumed)
    shutil.rmtree(resumed / "checkpoints" / "task_002")
    (resumed / "checkpoints" / "last").write_text("task_001")
    again = train(resumed, f"resume={resumed}")
    for key in ("time_s", "peak_mem_mb"):
        m.pop(key), again.pop(key)
    assert again == m
    for f in ("state.safetensors", "masks.safetensors"):
        a, b = (load_file(d / "checkpoints" / "task_002" / f) for d in (whole, resumed))
        assert a.keys() == b.keys() and all(torch.equal(read(a, k), read(b, k)) for k in a)


def read(state, key):
    # The memory's spare last row soaks up the samples the reservoir drops, in any order; it is never read.
    return state[key][:-1] if key == "memory.x" else state[key]
