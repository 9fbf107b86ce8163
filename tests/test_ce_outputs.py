"""ER and A-GEM in the class scenario read every output of the single head in their cross-entropy by default, as
Mammoth's er and agem do (the DER paper's tables come from them); method.ce_outputs=seen reads the classes seen so
far. Checked against the cross-entropy written out over the logits the network gave, and by the gradient that
reaches the future classes' outputs: pushed down under `all`, untouched under `seen`."""
import pytest
import torch
from test_der_erace import capture_loss, ce, fill
from test_online import build

from cl_bench.methods.base import Batch

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = ("backbone.hidden_sizes=[16]", "method.epochs=1", "scenario=class")


def backbone_inputs(method):
    """Every input the backbone is given from now on, in order."""
    inputs = []
    method.backbone.register_forward_pre_hook(lambda module, args: inputs.append(args[0].detach().clone()))
    return inputs


def expected_ce(method, x, y, outputs, seen):
    logits = method.heads.head(method.backbone(x))
    return ce(logits if outputs == "all" else logits[:, :seen], y)


@pytest.mark.parametrize("draw", ["distinct", "replacement"])
@pytest.mark.parametrize("outputs", ["all", "seen"])
def test_er_cross_entropy_reads_the_outputs_named(outputs, draw):
    method, tasks = build("method=er", "method.replay_batch_size=6", f"method.ce_outputs={outputs}",
                          f"method.replay_draw={draw}", *TINY)
    fill(method.memory, method, 2, 6, torch.Generator().manual_seed(1))
    loss = capture_loss(method, tasks[2])["loss"]
    raw, y, t = tasks[2].train.x[:5], tasks[2].train.y[:5], tasks[2].train.t[:5]
    name = "sample_distinct" if draw == "distinct" else "sample"  # the memory's draw that replay_draw names
    inputs, draws, sample = backbone_inputs(method), [], getattr(method.memory, name)
    setattr(method.memory, name, lambda *args, **kwargs: draws.append(sample(*args, **kwargs)) or draws[-1])
    got = loss(Batch(raw, method.info.view.eval(raw), y, t, step=3))

    seen = method.info.seen_outputs(2)
    replayed = draws[0][1]
    if draw == "distinct":  # 6 distinct rows of the 6 the memory holds: every row a real draw
        assert draws[0][4].all() and torch.unique(draws[0][0].flatten(1), dim=0).shape[0] == 6
    with torch.no_grad():
        want = expected_ce(method, inputs[0], torch.cat([y, replayed]), outputs, seen)
    torch.testing.assert_close(got.detach(), want, rtol=1e-5, atol=1e-6)

    got.backward()
    future = method.heads.head.bias.grad[seen:]
    assert (future > 0).all() if outputs == "all" else (future == 0).all()


@pytest.mark.parametrize("outputs", ["all", "seen"])
def test_agem_cross_entropies_read_the_outputs_named(outputs):
    method, tasks = build("method=agem", "method.replay_batch_size=6", f"method.ce_outputs={outputs}", *TINY)
    fill(method.memory, method, 2, 6, torch.Generator().manual_seed(1))
    method.heads.seen = seen = method.info.seen_outputs(2)
    raw, y, t = tasks[2].train.x[:5], tasks[2].train.y[:5], tasks[2].train.t[:5]
    future_before = method.heads.head.bias[seen:].detach().clone()
    with torch.no_grad():
        want = expected_ce(method, method.info.view.eval(raw), y, outputs, seen)
    inputs = backbone_inputs(method)
    got = method.glance(Batch(raw, method.info.view.eval(raw), y, t), tasks[2])

    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert len(inputs) == 2  # the batch's forward, then the memory's for the reference gradient
    moved = method.heads.head.bias[seen:].detach() - future_before
    # Both gradients push the future outputs down under `all`; A-GEM's projection keeps part of the batch's.
    assert (moved < 0).all() if outputs == "all" else (moved == 0).all()
