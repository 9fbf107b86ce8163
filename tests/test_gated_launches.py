"""gated's step in fewer aten calls (issue 73), and the same numbers: the gate noise of all units drawn at once,
the hard gates by one rounding, viewed (not unsqueezed twice) onto the feature maps, the frozen rows viewed once a
task and restored by a select that writes the parameter, and the batch norms' batch counts added in one op. Each
is held here to the computation it replaced, written out below, bit for bit on the CPU."""
import pytest
import torch
from omegaconf import OmegaConf
from test_gated import build

from cl_bench import backbones
from cl_bench.methods.gated import Gated
from cl_bench.nn import gated

pytestmark = pytest.mark.usefixtures("one_thread")


# --- the step before issue 73, written out -----------------------------------------------------------------------
def old_noise(like, noise):
    u = torch.rand_like(like, dtype=torch.float32).clamp_(1e-6, 1 - 1e-6)
    drawn = torch.log(u) - torch.log1p(-u) if noise == "logistic" else -torch.log(-torch.log(u))
    return gated.in_dtype(drawn, like.dtype)


class OldStraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, soft):
        return (soft > 0.5).to(soft.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad


def old_forward(self, x):
    """GatedUnit.forward: each unit drew its own noise."""
    h = self.body(x)
    self.out_pixels = h.shape[2] * h.shape[3]
    if self.training:
        logits = self.gates[self.tasks[0]](x, self.norm)
        soft = (torch.sigmoid(logits) if self.hard
                else torch.sigmoid((logits + old_noise(logits, self.noise)) / self.tau))
        self.last_gates = OldStraightThrough.apply(soft)
    else:
        self.last_gates = self._stacked_gates(x).to(h.dtype)
    return h * self.last_gates[:, :, None, None]


def old_gate_forward(self, x, norm="train", owed=None):
    h = self.fc1(x.mean((2, 3)))
    return self.fc2(torch.relu(old_normalise(self.norm, h, norm if self.training and h.shape[0] > 1 else "running")))


def old_task_norm_forward(self, z):
    if self.training:
        return old_normalise(self.bns[self.tasks[0]], z, self.norm)
    return OLD["task_norm_forward"](self, z)


def old_normalise(bn, z, norm):
    """nn.BatchNorm's own forward (which adds to its batch count) in plain training."""
    if norm == "train":
        return bn(z)
    stats = (bn.running_mean, bn.running_var) if norm == "running" else (None, None)
    return torch.nn.functional.batch_norm(z, *stats, bn.weight, bn.bias, norm == "batch", 0.0, bn.eps)


def old_start_task(self):
    self.anchor = [p.detach().clone() for p in self.kernel_params()]


def old_gate_density(self):
    return torch.stack([layer.last_gates.mean() for layer in self.layers]).mean()


@torch.no_grad()
def old_mask_frozen_grads(self):
    for p in self.kernel_params():
        if p.grad is not None:
            p.grad.masked_fill_(gated._rows(self.frozen, p), 0)


@torch.no_grad()
def old_restore_frozen(self):
    for p, a in zip(self.kernel_params(), self.anchor):
        p.copy_(torch.where(gated._rows(self.frozen, p), a, p))


OLD = {"task_norm_forward": gated.TaskNorm.forward}


def the_old_step(monkeypatch):
    monkeypatch.setattr(gated.GatedUnit, "forward", old_forward)
    monkeypatch.setattr(gated.GatedUnit, "start_task", old_start_task)
    monkeypatch.setattr(gated.GatedUnit, "mask_frozen_grads", old_mask_frozen_grads)
    monkeypatch.setattr(Gated, "gate_density", old_gate_density)
    monkeypatch.setattr(gated.GatedUnit, "restore_frozen", old_restore_frozen)
    monkeypatch.setattr(gated.Gate, "forward", old_gate_forward)
    monkeypatch.setattr(gated.TaskNorm, "forward", old_task_norm_forward)
    monkeypatch.setattr(gated, "draw_noise", lambda *args: None)
    monkeypatch.setattr(gated, "count_batches", lambda *args: None)


def learnt(scenario, backbone=None, tasks=2, **cfg):
    method, stream = build(scenario, epochs=2, batch_size=32, **cfg)
    if backbone is not None:  # the same method on another backbone, its parameters drawn from the same seed
        torch.manual_seed(0)
        net = backbones.build(OmegaConf.create(backbone), method.info.input_shape)
        method, _ = build(scenario, epochs=2, batch_size=32, **cfg)
        method = type(method)(method.cfg, net, method.info, method.ctx)
    for task in stream[:tasks]:
        method.learn(task)
    return method.state_dict()


@pytest.mark.parametrize("scenario, backbone, cfg", [
    ("task", None, {}),
    ("task", None, {"gate_noise": "gumbel", "optimizer": "sgd", "momentum": 0.9, "weight_decay": 1e-3}),
    ("class", None, {"memory_size": 60}),  # the joint step: a second, sampled forward of the current path
    ("class", None, {"memory_size": 60, "task_loss_gates": "hard", "task_loss_norm": "batch"}),
    ("task", {"name": "resnet18_reduced", "nf": 4}, {}),  # units nested in residual blocks draw inner first
])
def test_the_step_trains_as_before_to_the_bit(monkeypatch, scenario, backbone, cfg):
    new = learnt(scenario, backbone, **cfg)
    with monkeypatch.context() as patch:
        the_old_step(patch)
        old = learnt(scenario, backbone, **cfg)
    assert new.keys() == old.keys()
    assert [k for k in new if not torch.equal(new[k], old[k])] == []


def test_noise_is_drawn_in_the_order_the_units_compute_their_gates():
    """In a residual block the gate after conv1 (inside the block) computes before the block's own, which is
    registered first."""
    torch.manual_seed(0)
    net = backbones.build(OmegaConf.create({"name": "resnet18_reduced", "nf": 4}), (3, 8, 8))
    units = gated.convert(net, num_tasks=1)
    order = gated.forward_order(units, lambda: net.eval()(torch.zeros(1, 3, 8, 8)))
    assert sorted(map(id, order)) == sorted(map(id, units))
    nested = [(outer, inner) for outer in units for inner in outer.body.modules() if isinstance(inner, gated.GatedUnit)]
    assert len(nested) == 8 and all(order.index(inner) < order.index(outer) for outer, inner in nested)
    assert all(units.index(inner) > units.index(outer) for outer, inner in nested)  # registration: the other way


def learning_calls() -> tuple[list, int]:
    """The outermost aten calls (as scripts/bench.py's launches section counts them) of tasks 0 and 1's learning,
    by name, and their steps (the same in each)."""
    from test_launches import outermost_aten_calls
    method, stream = build("task", epochs=1, batch_size=32)
    calls = [outermost_aten_calls(lambda task=task: method.learn(task)) for task in stream[:2]]
    return calls, method.loop.steps_per_epoch(stream[1].train)


def test_the_gate_noise_ops_and_the_batch_counts_run_once_a_step(monkeypatch):
    (first, new), steps = learning_calls()
    with monkeypatch.context() as patch:
        the_old_step(patch)
        (old_first, old), _ = learning_calls()
    units = 2
    assert new["aten::rand"] == new["aten::log1p"] == steps and old["aten::rand_like"] == units * steps
    assert new["aten::round"] == units * steps and new["aten::gt"] == old["aten::gt"] - units * steps
    # each unit's two batch norms added to their counts in turn, now all in one op a step
    # (and the sparsity term's gradient now joins the gates' as an add: the old one was added in place)
    assert old["aten::add_"] - new["aten::add_"] == 3 * units * steps and new["aten::add"] > old["aten::add"]
    assert new["aten::_foreach_add_"] - old["aten::_foreach_add_"] == steps
    # the gates viewed onto the maps (evaluation's too): no unsqueeze twice, nor its backward's squeeze twice
    assert old["aten::unsqueeze"] - new["aten::unsqueeze"] >= 2 * units * steps
    assert old["aten::squeeze"] == 2 * units * steps and new["aten::squeeze"] == 0
    assert old["aten::copy_"] - new["aten::copy_"] == units * steps  # the frozen rows restored by the select
    assert old["aten::select"] - new["aten::select"] == units * steps  # the sparsity term's backward
    assert sum(old.values()) - sum(new.values()) >= 18 * steps
    # the first task has no frozen kernel to guard
    assert old_first["aten::masked_fill_"] == units * steps and first["aten::masked_fill_"] == 0
