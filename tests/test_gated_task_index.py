"""gated's stacked evaluation (every step of the class scenario's task loss, and its predictions) indexes the
routed tasks' rows with a tensor built once per task list, not made afresh in every unit at every forward (on a GPU
a blocking host-to-device copy each time)."""
import torch
from omegaconf import OmegaConf

from cl_bench import backbones
from cl_bench.nn import gated


def test_the_routed_tasks_index_is_built_once_per_task_list(monkeypatch):
    torch.manual_seed(0)
    backbone = backbones.build(OmegaConf.create({"name": "convnet", "channels": [8, 16]}), (3, 32, 32))
    layers = gated.convert(backbone, num_tasks=3)
    modules = gated.routed(backbone)
    layers[0].usable[1, :4] = False  # a learned task's unusable kernels: the index picks its own row
    backbone.eval()
    x = torch.randn(4, 3, 32, 32)
    built = []
    tensor = torch.tensor
    monkeypatch.setattr(torch, "tensor", lambda *a, **k: built.append(a[0]) or tensor(*a, **k))
    with torch.no_grad():
        gated.route(modules, [0, 1])
        first = backbone(x.repeat(2, 1, 1, 1))
        assert built == [[0, 1]] * len(layers)
        gates = layers[0].last_gates.clone()
        again = [backbone(x.repeat(2, 1, 1, 1)) for _ in range(3)]  # the same list, step after step: none built
        gated.route(modules, [0, 1, 2])
        backbone(x.repeat(3, 1, 1, 1))
        gated.route(modules, [0, 1])
        last = backbone(x.repeat(2, 1, 1, 1))
    assert built == [[0, 1]] * len(layers) + [[0, 1, 2]] * len(layers)
    assert all(torch.equal(first, out) for out in [*again, last])
    assert not gates[4:, :4].any() and torch.equal(layers[0].last_gates, gates)  # task 1's rows: kernels 0-3 off
