"""LUCIR (Hou et al. 2019): the cosine head, the less-forget constraint with its adaptive weight, the margin
ranking loss, imprinted weights, the backbone without its last ReLU, the exemplar budget and the class-balanced
finetuning, each against a hand computation or the official code's rule, and a run through the real CLI."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import cl_bench
from test_online import build
from torch import nn

from cl_bench import backbones
from cl_bench.errors import UserError
from cl_bench.methods.base import Batch
from cl_bench.methods.lucir import LUCIRConfig, adaptive_lambda, less_forget, margin_ranking

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = ("method=lucir", "scenario=class", "backbone.hidden_sizes=[16]", "method.epochs=1", "method.memory_size=20")


def test_cosine_head_logits_are_sigma_times_the_cosines():
    method, _ = build(*TINY)
    head = method.heads
    with torch.no_grad():
        head.weights[0].copy_(torch.zeros(2, 16))
        head.weights[0][0, :2] = torch.tensor([1.0, 0.0])
        head.weights[0][1, :2] = torch.tensor([0.0, 2.0])
        head.weights[1].copy_(torch.zeros(2, 16))
        head.weights[1][0, :2] = torch.tensor([3.0, 4.0])
        head.weights[1][1, :2] = torch.tensor([-1.0, 0.0])
        head.sigma.fill_(2.0)
    features = torch.zeros(1, 16)
    features[0, :2] = torch.tensor([6.0, 8.0])  # direction (0.6, 0.8): cosines 0.6, 0.8, 1.0, -0.6
    head.seen = 4
    torch.testing.assert_close(head(features, None), torch.tensor([[1.2, 1.6, 2.0, -1.2]]))
    head.seen = 2  # only the outputs seen so far
    torch.testing.assert_close(head(features, None), torch.tensor([[1.2, 1.6]]))
    assert head.sigma.requires_grad and head.sigma.shape == (1,)
    fresh, _ = build(*TINY)
    assert float(fresh.heads.sigma.detach()) == 1.0  # the official initial scale
    assert fresh.heads.weights[3].abs().max() <= 1 / math.sqrt(16)  # uniform in ±1/sqrt(feature_dim)


def test_less_forget_is_one_minus_the_cosine_of_new_and_old_features():
    new = torch.tensor([[1.0, 0.0], [0.0, 3.0]])
    old = torch.tensor([[1.0, 1.0], [0.0, -1.0]])
    # cosines 1/sqrt(2) and -1
    want = ((1 - 2 ** -0.5) + (1 - (-1))) / 2
    assert float(less_forget(new, old)) == pytest.approx(want)
    # the official CosineEmbeddingLoss with target 1 is the same quantity
    official = nn.CosineEmbeddingLoss()(new, old, torch.ones(2))
    assert float(official) == pytest.approx(want)


def test_margin_ranking_applies_to_old_class_samples_against_the_top_k_new_classes():
    # classes 0-1 old, 2-4 new; K = 2, m = 0.5
    cos = torch.tensor([[0.9, 0.1, 0.5, 0.7, 0.2],   # label 0: ground truth 0.9, hardest new 0.7, 0.5
                        [0.2, 0.3, 0.6, 0.1, 0.4],   # label 1: ground truth 0.3, hardest new 0.6, 0.4
                        [0.0, 0.0, 0.9, 0.8, 0.7]])  # label 3: a new class, left out
    y = torch.tensor([0, 1, 3])
    # max(0, 0.5 - 0.9 + 0.7), max(0, 0.5 - 0.9 + 0.5), max(0, 0.5 - 0.3 + 0.6), max(0, 0.5 - 0.3 + 0.4)
    want = (0.3 + 0.1 + 0.8 + 0.6) / 4
    assert float(margin_ranking(cos, y, 2, 2, 0.5)) == pytest.approx(want)
    # the official form: MarginRankingLoss on the old-class rows, each ground truth repeated K times
    rows = y < 2
    gt = cos.gather(1, y[:, None])[rows].repeat(1, 2)
    hardest = cos[rows, 2:].topk(2, dim=1).values
    official = nn.MarginRankingLoss(margin=0.5)(gt.reshape(-1), hardest.reshape(-1), torch.ones(4))
    assert float(official) == pytest.approx(want)
    # K = 1: only the hardest new class
    assert float(margin_ranking(cos, y, 2, 1, 0.5)) == pytest.approx((0.3 + 0.8) / 2)
    # no old-class sample in the batch: no loss, and no gradient to the new-class rows
    cos = cos.clone().requires_grad_(True)
    loss = margin_ranking(cos, torch.tensor([2, 3, 4]), 2, 2, 0.5)
    loss.backward()
    assert loss.item() == 0.0 and not cos.grad.any()


def test_adaptive_lambda_grows_with_the_share_of_old_classes():
    assert adaptive_lambda(5.0, 50, 10) == pytest.approx(5 * math.sqrt(5))  # CIFAR-100, 50 + 5 × 10
    assert adaptive_lambda(5.0, 8, 2) == pytest.approx(10.0)
    assert adaptive_lambda(5.0, 8, 2, adaptive=False) == 5.0


def test_the_loss_of_a_later_task_sums_ce_less_forget_and_margin_ranking(monkeypatch):
    """Task 2 of split_digits: 4 old classes, 2 new, so λ = 5·sqrt(4 / 2); the teacher is the backbone as it was
    before the task, and the data are the task's samples and the exemplars."""
    method, tasks = build(*TINY)
    method.learn(tasks[0])
    method.learn(tasks[1])
    before = copy.deepcopy(method.backbone)
    captured, fit = {}, method.loop.fit
    monkeypatch.setattr(method.loop, "fit", lambda task, loss_fn, data, params: (captured.update(
        loss=loss_fn, data=data, params=params), fit(task, loss_fn, data=data, params=params, epochs=0))[1])
    method.learn(tasks[2])  # the phase runs, for no epoch
    data = captured["data"]
    assert len(data) == len(tasks[2].train) + 8 and (data.y < 4).sum() == 8  # 2 exemplars of each old class
    # trained: the backbone, σ and the new classes' vectors; the old classes' vectors are frozen
    assert {id(p) for p in captured["params"]} == {id(p) for p in [*method.backbone.parameters(), method.heads.sigma,
                                                                   method.heads.weights[2]]}
    with torch.no_grad():  # the network moves away from the teacher, as training would
        for p in method.backbone.parameters():
            p.add_(0.1 * torch.randn_like(p))
    take = torch.cat([torch.arange(10), torch.arange(len(data) - 8, len(data))])  # new samples and exemplars
    raw, y = data.x[take], data.y[take]
    x = method.info.view.eval(raw)
    got = captured["loss"](Batch(raw, x, y, data.t[take]))
    with torch.no_grad():
        f, g = method.backbone(x), before(x)
        w = torch.cat(list(method.heads.weights))[:6]
        cos = (f / f.norm(dim=1, keepdim=True)) @ (w / w.norm(dim=1, keepdim=True)).T
        ce = F.cross_entropy(method.heads.sigma * cos, y)
        lf = (1 - (f * g).sum(1) / (f.norm(dim=1) * g.norm(dim=1))).mean()
        pairs = [max(0.0, 0.5 - float(cos[i, y[i]]) + float(c)) for i in range(len(y)) if y[i] < 4
                 for c in sorted(cos[i, 4:].tolist(), reverse=True)[:2]]
        want = ce + 5 * math.sqrt(2) * lf + sum(pairs) / len(pairs)
    assert len(pairs) == 16 and float(lf) > 1e-4
    assert got.item() == pytest.approx(want.item(), rel=1e-5)


def test_new_class_weights_are_imprinted_from_normalised_class_means():
    method, tasks = build(*TINY)
    method.learn(tasks[0])
    old_norm = method.heads.weights[0].detach().norm(dim=1).mean()
    method.imprint(tasks[1])
    method.eval()
    with torch.no_grad():
        phi = F.normalize(method.backbone(method.info.view.eval(tasks[1].train.x)), dim=1)
    imprinted = method.heads.weights[1].detach()
    for row, c in enumerate((2, 3)):
        mean = phi[tasks[1].train.y == c].mean(0)
        torch.testing.assert_close(F.normalize(imprinted[row], dim=0), mean / mean.norm())
        assert float(imprinted[row].norm()) == pytest.approx(float(old_norm))


def test_a_later_task_freezes_the_old_class_vectors_and_imprints_the_new_ones(monkeypatch):
    method, tasks = build(*TINY)
    method.learn(tasks[0])
    old = method.heads.weights[0].detach().clone()
    drawn = method.heads.weights[1].detach().clone()
    method.learn(tasks[1])
    assert torch.equal(method.heads.weights[0], old)
    assert not torch.equal(method.heads.weights[1], drawn)
    off, _ = build(*TINY, "method.imprint=false")
    off.learn(tasks[0])
    drawn = off.heads.weights[1].detach().clone()
    fit = off.loop.fit
    monkeypatch.setattr(off.loop, "fit", lambda *a, **k: fit(*a, **{**k, "epochs": 0}))
    off.learn(tasks[1])
    assert torch.equal(off.heads.weights[1], drawn)  # not imprinted: the initial draw


@pytest.mark.parametrize("name, shape, kwargs", [("mlp", (1, 8, 8), {"hidden_sizes": [16, 16]}),
                                                ("convnet", (1, 8, 8), {"channels": [4, 8, 8]}),
                                                ("resnet18", (3, 16, 16), {"nf": 4}),
                                                ("vgg16_bn", (3, 32, 32), {"hidden": 8})])
def test_remove_final_relu_returns_the_last_relus_input(name, shape, kwargs):
    """The features become what the last ReLU received (then average-pooled in the conv nets): negative values
    appear, the other ReLUs and every parameter stay."""
    torch.manual_seed(0)
    plain = backbones.build({"name": name, **kwargs}, shape).eval()
    stripped = copy.deepcopy(plain)
    backbones.remove_final_relu(stripped)
    last = [m for m in plain.modules() if isinstance(m, nn.ReLU)][-1]
    inputs = []
    last.register_forward_pre_hook(lambda m, args: inputs.append(args[0].clone()))
    x = torch.randn(3, *shape)
    with torch.no_grad():
        before, after = plain(x), stripped(x)
    z = inputs[-1]  # the last call of the last ReLU module (ResNet's block calls it twice)
    pool = (lambda t: t.mean((2, 3))) if z.dim() == 4 else (lambda t: t)
    torch.testing.assert_close(after, pool(z))
    torch.testing.assert_close(before, pool(F.relu(z)))
    assert (after < 0).any() and not (before < 0).any()
    assert stripped.state_dict().keys() == plain.state_dict().keys()


def test_lucir_removes_the_final_relu_unless_told_not_to():
    method, tasks = build(*TINY)
    assert (method.features(tasks[0].train.x) < 0).any()
    kept, _ = build(*TINY, "method.remove_final_relu=false")
    assert not (kept.features(tasks[0].train.x) < 0).any()


@pytest.mark.parametrize("budget, counts", [("per_class", ([2] * 2, [2] * 4)), ("fixed", ([10] * 2, [5] * 4))])
def test_memory_keeps_memory_size_over_all_classes_per_class_or_a_fixed_total(budget, counts):
    method, tasks = build(*TINY, f"method.memory_budget={budget}")
    method.learn(tasks[0])
    assert method.memory.class_count[:2].tolist() == counts[0]
    method.learn(tasks[1])
    assert method.memory.class_count[:4].tolist() == counts[1] and not method.memory.class_count[4:].any()


def test_balanced_finetuning_trains_the_class_vectors_alone_on_the_exemplars(monkeypatch):
    method, tasks = build(*TINY, "method.balanced_finetune=true", "method.finetune_epochs=2")
    method.learn(tasks[0])
    calls = []
    fit = method.loop.fit

    def recording_fit(task, loss_fn, data, params, **kw):
        calls.append({"data": data, "params": params, "backbone": copy.deepcopy(method.backbone.state_dict()),
                      "sigma": float(method.heads.sigma.detach()), **kw})
        return fit(task, loss_fn, data=data, params=params, **kw)

    monkeypatch.setattr(method.loop, "fit", recording_fit)
    method.learn(tasks[1])
    assert len(calls) == 2
    tuning = calls[1]
    stored = method.memory.stored()
    assert torch.equal(tuning["data"].x, stored[0]) and torch.bincount(tuning["data"].y).tolist() == [2] * 4
    assert [id(p) for p in tuning["params"]] == [id(w) for w in method.heads.weights[:2]]
    assert tuning["epochs"] == 2 and tuning["milestones"] == [10]
    assert tuning["optimizer"].param_groups[0]["lr"] == pytest.approx(0.01)
    for k, v in method.backbone.state_dict().items():  # the backbone, batch-norm statistics included, unchanged
        assert torch.equal(v, tuning["backbone"][k]), k
    assert float(method.heads.sigma.detach()) == tuning["sigma"]


def test_lucir_checks_its_options_and_the_dataset():
    with pytest.raises(UserError, match="method.hard_negatives"):
        LUCIRConfig(hard_negatives=0)
    with pytest.raises(UserError, match="method.margin"):
        LUCIRConfig(margin=-1.0)
    with pytest.raises(UserError, match="exceeds the 2 new classes"):
        build(*TINY, "method.hard_negatives=3")
    with pytest.raises(UserError, match="memory_size=5 is below the 10 classes"):
        build(*TINY, "method.memory_size=5")


@pytest.mark.slow  # a process; its run in the class scenario is its trial's (test_method_contract.py)
def test_the_task_scenario_is_refused_in_one_line(tmp_path):
    proc = cl_bench("train", "method=lucir", "scenario=task", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2
    assert "method=lucir does not support scenario=task (it supports class)" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
