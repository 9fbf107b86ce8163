"""iCaRL (nearest mean of exemplars, sigmoid distillation, herding after each task) and GDumb (a network trained
from scratch on the greedy memory alone, the official schedule and CutMix), each against a hand computation or
the reference's rule, and each through the real CLI in every scenario it supports."""
import copy
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from test_online import build
from torch import nn

from cl_bench import backbones, config
from cl_bench.errors import UserError
from cl_bench.methods import gdumb as gdumb_module
from cl_bench.methods import icarl as icarl_module
from cl_bench.methods.gdumb import cutmix, warm_restart_lr
from cl_bench.methods.icarl import ICaRL

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = ("backbone.hidden_sizes=[16]", "method.epochs=1", "dataset.num_tasks=2")


class Corners(nn.Module):
    """A stand-in backbone whose 2-d feature is the input's top-left and top-right pixels: a left-right flip swaps
    them."""

    feature_dim = 2

    def forward(self, x):
        return torch.stack([x[:, 0, 0, 0], x[:, 0, 0, -1]], 1)


def images(corners):
    """8×8 images whose top-left and top-right pixels are the given pairs."""
    x = torch.zeros(len(corners), 1, 8, 8, dtype=torch.uint8)
    x[:, 0, 0, 0], x[:, 0, 0, -1] = torch.tensor(corners).T
    return x


def icarl_with_corners(*overrides):
    method, tasks = build("method=icarl", "scenario=class", "method.memory_size=20", *TINY, *overrides)
    method.backbone = Corners()
    method.class_means = torch.zeros(10, 2)
    method.info.view.scale, method.info.view.shift = 1.0, 0.0  # features are the raw pixel values
    return method, tasks


def test_nme_logits_are_negative_squared_distances_to_the_class_means():
    method, _ = icarl_with_corners()
    method.class_means[:4] = torch.tensor([[1.0, 0], [0, 1], [-1, 0], [0, -1]])
    method.heads.seen = 4
    x = torch.tensor([[3.0, 4.0], [-0.2, -6.0]]).view(2, 1, 1, 2).expand(2, 1, 8, 2)
    logits = method.predict(x, None)
    # (3, 4) normalised is (0.6, 0.8): squared distances 0.16 + 0.64, 0.36 + 0.04, 2.56 + 0.64, 0.36 + 3.24
    torch.testing.assert_close(logits[0], torch.tensor([-0.8, -0.4, -3.2, -3.6]))
    assert logits.argmax(1).tolist() == [1, 3]
    assert method.predict(x, None).shape == (2, 4)


@pytest.mark.parametrize("flips, mean", [("never", [1.0, 0.0]), ("always", [2 ** -0.5, 2 ** -0.5])])
def test_class_means_are_the_renormalised_means_of_normalised_exemplar_features(flips, mean):
    method, _ = icarl_with_corners(f"method.mean_flips={flips}")
    # Class 0: exemplars with features (3, 0) and (5, 0); class 1: (2, 0) and (0, 7), normalised (1, 0) and (0, 1)
    # whose mean (0.5, 0.5) renormalised is (0.707, 0.707). Flipped, (3, 0) becomes (0, 3).
    x = images([(3, 0), (5, 0), (2, 0), (0, 7)])
    method.memory._write(x, torch.tensor([0, 0, 1, 1]), torch.zeros(4, dtype=torch.long))
    method.memory.class_count[:2] = 2
    method.update_class_means()
    torch.testing.assert_close(method.class_means[0], torch.tensor(mean))
    torch.testing.assert_close(method.class_means[1], torch.tensor([2 ** -0.5, 2 ** -0.5]))
    assert not method.class_means[2:].any()


def test_mean_flips_follow_the_datasets_augmentation_by_default():
    method, _ = build("method=icarl", "scenario=class", "method.memory_size=20", *TINY)
    assert method.flips_in_means() is False  # split_digits trains without flips
    method.info.view.augment = True
    assert method.flips_in_means() is True


def test_distillation_targets_are_the_previous_models_sigmoid_outputs(monkeypatch):
    method, tasks = build("method=icarl", "scenario=class", "method.memory_size=20", *TINY)
    method.learn(tasks[0])
    before = copy.deepcopy(method).eval()
    calls, fitted = [], []
    bce = F.binary_cross_entropy_with_logits

    def recording_bce(logits, targets):
        calls.append((logits.detach().clone(), targets.clone()))
        return bce(logits, targets)

    def recording_loss(loss_fn):
        def loss(batch):
            fitted.append(batch)
            return loss_fn(batch)
        return loss

    monkeypatch.setattr(icarl_module.F, "binary_cross_entropy_with_logits", recording_bce)
    fit = method.loop.fit
    monkeypatch.setattr(method.loop, "fit", lambda task, loss_fn, **kw: fit(task, recording_loss(loss_fn), **kw))
    method.learn(tasks[1])
    batch = fitted[0]
    logits, targets = calls[0]
    assert logits.shape == targets.shape == (batch.y.shape[0], 10)  # every class seen so far
    with torch.no_grad():
        old = torch.sigmoid(before.heads.head(before.backbone(batch.x))[:, :5])
    torch.testing.assert_close(targets[:, :5], old)  # old classes: the pre-task network's outputs
    torch.testing.assert_close(targets[:, 5:], F.one_hot(batch.y, 10)[:, 5:].float())  # new classes: the labels
    # the loss is the mean binary cross-entropy over samples and outputs
    p = torch.sigmoid(logits)
    want = -(targets * p.log() + (1 - targets) * (1 - p).log()).mean()
    torch.testing.assert_close(bce(logits, targets), want)
    # trained on the new task's data and the exemplars of the old classes
    assert sum(len(b.y) for b in fitted) == len(tasks[1].train) + 20
    assert (torch.cat([b.y for b in fitted]) < 5).sum() == 20


def test_herding_after_each_task_fills_memory_size_over_classes_seen():
    method, tasks = build("method=icarl", "scenario=class", "method.memory_size=20", *TINY)
    method.learn(tasks[0])
    assert method.memory.class_count[:5].tolist() == [4] * 5  # 20 // 5
    first_picks = {c: method.memory.x[: 20][(method.memory.y[: 20] == c) & (method.memory.rank[: 20] < 2)]
                   for c in range(5)}
    method.learn(tasks[1])
    assert method.memory.class_count.tolist() == [2] * 10  # 20 // 10
    for c in range(5):
        assert torch.equal(method.memory.x[: 20][method.memory.y[: 20] == c], first_picks[c])
    assert method.class_means.norm(dim=1).tolist() == pytest.approx([1.0] * 10)


def test_icarl_refuses_tasks_that_share_labels():
    method, _ = build("method=icarl", "scenario=class", "method.memory_size=20", *TINY)
    shared = replace(method.info, offsets=[0, 0], task_classes=[list(range(5))] * 2)
    with pytest.raises(UserError, match="share their labels"):
        ICaRL(method.cfg, method.backbone, shared, method.ctx)


def test_gdumb_retrains_a_fresh_network_on_the_memory_alone(monkeypatch):
    method, tasks = build("method=gdumb", "scenario=class", "method.memory_size=30", *TINY)
    method.learn(tasks[0])
    trained = {k: v.clone() for k, v in method.state_dict().items() if "memory" not in k}
    seen = {}
    fit = method.loop.fit

    def recording_fit(task, loss_fn, data, **kw):
        seen["start"] = {k: v.clone() for k, v in method.state_dict().items() if "memory" not in k}
        seen["data"] = data

        def loss(batch):
            seen.setdefault("raw", []).append(batch.raw)
            return loss_fn(batch)
        return fit(task, loss, data=data, **kw)

    monkeypatch.setattr(method.loop, "fit", recording_fit)
    torch.manual_seed(123)
    method.learn(tasks[1])
    # A fresh initialisation: what building the network from scratch draws from the same random state.
    torch.manual_seed(123)
    cfg = config.compose(["method=gdumb", "backbone=mlp", "backbone.hidden_sizes=[16]"])
    fresh = backbones.build(cfg.backbone, method.info.input_shape)
    head = nn.Linear(fresh.feature_dim, method.info.num_outputs)
    for k, v in fresh.state_dict().items():
        assert torch.equal(seen["start"][f"backbone.{k}"], v), k
        assert not torch.equal(v, trained[f"backbone.{k}"])
    assert torch.equal(seen["start"]["heads.head.weight"], head.weight)
    # Trained on the memory only: 30 // 10 = 3 samples of each class, every batch drawn from them.
    mem_x, mem_y, _ = method.memory.stored()
    assert torch.bincount(seen["data"].y).tolist() == [3] * 10 and torch.equal(seen["data"].x, mem_x)
    stored = {bytes(r) for r in mem_x.flatten(1).numpy()}
    trained_on = torch.cat(seen["raw"])
    assert len(trained_on) == 30 and all(bytes(r) in stored for r in trained_on.flatten(1).numpy())


def test_gdumbs_reservoir_option_keeps_a_uniform_sample_of_the_stream_as_mammoth():
    """Mammoth's GDumb adds every sample to a reservoir (utils/buffer.py: the first `size` samples, then each with
    probability size / seen): the memory's classes are as the draw falls, where the paper's greedy sampler holds
    size // classes of each."""
    counts = {}
    for sampler in ("greedy", "reservoir"):
        method, tasks = build("method=gdumb", "scenario=class", "method.memory_size=30", f"method.sampler={sampler}",
                              *TINY)
        method.learn(tasks[0])
        x, y, _ = method.memory.stored()
        assert int(method.memory.seen) == len(tasks[0].train)
        assert {bytes(r) for r in x.flatten(1).numpy()} <= {bytes(r) for r in tasks[0].train.x.flatten(1).numpy()}
        counts[sampler] = torch.bincount(y, minlength=5).tolist()
    assert max(counts["greedy"]) - min(counts["greedy"]) <= 1, counts  # balanced, as far as the stream allows
    assert sum(counts["reservoir"]) == 30 and max(counts["reservoir"]) - min(counts["reservoir"]) > 1, counts


def test_gdumb_masks_its_one_head_to_the_task_in_the_task_scenario():
    method, tasks = build("method=gdumb", "scenario=task", "method.memory_size=30", *TINY)
    method.learn(tasks[0])
    method.learn(tasks[1])
    assert method.heads.head.out_features == 10  # one output per class, as the official network
    x = method.info.view.eval(tasks[1].val.x[:4])
    method.eval()
    with torch.no_grad():
        assert torch.equal(method.predict(x, 1), method(x, None)[:, 5:10])


def test_gdumb_lr_schedule_is_the_official_warm_up_then_warm_restarts():
    # As drimpossible/GDumb's main.py drives it: epoch 0 at maxlr / 10, epoch 1 at maxlr, then the scheduler
    # CosineAnnealingWarmRestarts(T_0=1, T_mult=2, eta_min=minlr) stepped at the start of every later epoch.
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.05)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=1, T_mult=2, eta_min=0.0005)
    official = []
    for epoch in range(40):
        if epoch == 0:
            opt.param_groups[0]["lr"] = 0.005
        elif epoch == 1:
            opt.param_groups[0]["lr"] = 0.05
        else:
            sched.step()
        official.append(opt.param_groups[0]["lr"])
    assert [warm_restart_lr(e, 0.05, 0.0005) for e in range(40)] == pytest.approx(official, abs=1e-12)
    assert warm_restart_lr(3, 0.05, 0.0005) == pytest.approx(0.0005 + 0.0495 / 2)  # half way through a period of 2


def test_cutmix_pastes_one_box_from_a_partner_and_weighs_by_the_uncovered_share():
    x = torch.arange(6.0).view(6, 1, 1, 1).expand(6, 3, 10, 10).clone()  # image i is all i
    g = torch.Generator().manual_seed(3)
    for _ in range(20):
        mixed, y, partner, kept = cutmix(x, torch.arange(6), 1.0, 1.0, g)
        own = mixed == x
        from_partner = mixed == partner.view(6, 1, 1, 1).float()
        assert (own | from_partner).all() and (own.all(1) | ~own.any(1)).all()  # one box, in every channel
        moved = (partner != torch.arange(6)).nonzero()
        if len(moved):
            covered = ~own[moved[0, 0], 0]
            assert float(kept) == pytest.approx(1 - covered.float().mean().item())
            assert (~own[moved[:, 0], 0] == covered).all()  # the same box in every image
    mixed, _, _, kept = cutmix(x, torch.arange(6), 1.0, 0.0, g)
    assert torch.equal(mixed, x) and float(kept) == 1.0  # never mixed with probability 0


def test_gdumb_checks_its_options():
    with pytest.raises(UserError, match="method.lr_milestones"):
        gdumb_module.GDumbConfig(lr_milestones=[10])
    with pytest.raises(UserError, match="method.cutmix_prob"):
        gdumb_module.GDumbConfig(cutmix_prob=1.5)


# Their runs in each scenario, the contract, the memory recorded and learning above chance: their trials
# (test_method_contract.py)
