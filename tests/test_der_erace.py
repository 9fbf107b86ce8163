"""DER, DER++ (Buzzega et al. 2020, as Mammoth runs them) and ER-ACE (Caccia et al. 2022, as pclucas14/AML runs
it): the logits DER stores, each loss against a hand computation, ACE's mask and its gradient, and each method
through the real CLI in every scenario it supports."""
import copy

import pytest
import torch
from test_online import build

from cl_bench import methods
from cl_bench.methods.base import Batch
from cl_bench.methods.memory import Memory

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = ("backbone.hidden_sizes=[16]", "method.epochs=1")


def capture_loss(method, task):
    """The per-step loss train_task hands to fit(), without training."""
    seen = {}
    method.loop.fit = lambda task, loss, **kwargs: seen.update(loss=loss, **kwargs)
    method.heads.seen = method.info.seen_outputs(task.id)
    method.train_task(task)
    return seen


def ce(logits, target):
    """Cross-entropy written out: -z_y + log sum_j exp z_j, averaged over the rows."""
    return (logits.logsumexp(1) - logits.gather(1, target[:, None]).squeeze(1)).mean()


def own_head(method, x, t):
    """Per sample: the logits of its own task's head (task scenario) or every output of the single head."""
    features = method.backbone(x)
    if method.info.scenario == "class":
        return [method.heads.head(features[i]) for i in range(len(t))]
    return [method.heads.heads[int(t[i])](features[i]) for i in range(len(t))]


def columns(method, t):
    first = method.info.offsets[t] if method.info.scenario == "task" else 0
    size = method.info.sizes[t] if method.info.scenario == "task" else method.info.num_outputs
    return slice(first, first + size)


@pytest.mark.parametrize("scenario", ["class", "task"])
def test_der_stores_the_logits_the_model_gave_before_its_step(scenario):
    method, tasks = build("method=der", f"scenario={scenario}", "method.batch_size=8", *TINY)
    snapshots, expected = [], []

    def before_forward(module, args):
        if len(snapshots) == len(expected):  # the step's first forward: the current batch, before the step
            snapshots.append(copy.deepcopy(method))

    add = method.memory.add

    def checked_add(raw, y, t, logits=None, generator=None):
        then = snapshots[-1]
        with torch.no_grad():
            want = torch.zeros(len(y), method.info.num_outputs)
            for i, row in enumerate(own_head(then, method.info.view.eval(raw), t)):
                want[i, columns(method, int(t[i]))] = row
        expected.append(want)
        add(raw, y, t, logits=logits, generator=generator)

    method.backbone.register_forward_pre_hook(before_forward)
    method.memory.add = checked_add
    method.learn(tasks[0])
    n = int(method.memory.filled())
    assert 0 < n < method.memory.size and len(expected) > 2  # the stream so far fills rows 0..n-1 in order
    torch.testing.assert_close(method.memory.logits[:n], torch.cat(expected), rtol=1e-5, atol=1e-5)
    assert not torch.equal(expected[0], expected[-1])  # the model moved between steps


def fill(memory: Memory, method, task_id: int, n: int, g):
    """n random stored samples of tasks before task_id, with random stored logits in their compared columns."""
    t = torch.randint(0, task_id, (n,), generator=g)
    offsets = torch.tensor(method.info.offsets)
    y = offsets[t] + torch.randint(0, 2, (n,), generator=g)
    logits = torch.randn(n, method.info.num_outputs, generator=g)
    if method.info.scenario == "task":
        keep = torch.zeros_like(logits, dtype=torch.bool)
        for i in range(n):
            keep[i, columns(method, int(t[i]))] = True
        logits = logits * keep
    raw = torch.randint(0, 17, (n, *method.info.input_shape), generator=g, dtype=torch.uint8)
    memory.add(raw, y, t, logits=logits, generator=g)
    return raw, y, t, logits


def current_batch(task, n):
    raw, y, t = task.train.x[:n], task.train.y[:n], task.train.t[:n]
    return raw, y, t


@pytest.mark.parametrize("name", ["der", "derpp"])
@pytest.mark.parametrize("scenario, outputs", [("class", "all"), ("class", "seen"), ("task", "all")])
def test_der_loss_is_ce_plus_alpha_mse_plus_beta_ce_by_hand(name, scenario, outputs):
    """The memory holds exactly one replay batch, so each draw without replacement returns all of it. Mammoth's
    cross-entropy reads every output of the class scenario's head; ce_outputs=seen the classes seen so far."""
    method, tasks = build(f"method={name}", f"scenario={scenario}", "method.replay_batch_size=6",
                          f"method.ce_outputs={outputs}",
                          "method.alpha=0.7", *(["method.beta=0.4"] if name == "derpp" else []), *TINY)
    g = torch.Generator().manual_seed(1)
    mem_raw, mem_y, mem_t, stored = fill(method.memory, method, 2, 6, g)
    loss = capture_loss(method, tasks[2])["loss"]
    raw, y, t = current_batch(tasks[2], 5)
    view = method.info.view.eval
    got = loss(Batch(raw, view(raw), y, t, step=3))

    seen = method.info.seen_outputs(2) if outputs == "seen" else method.info.num_outputs
    rows = own_head(method, view(raw), t)
    if scenario == "class":
        want = ce(torch.stack(rows)[:, :seen], y)
    else:
        want = ce(torch.stack(rows), y - method.info.offsets[2])
    mem_rows = own_head(method, view(mem_raw), mem_t)
    squares = torch.cat([(z - stored[i, columns(method, int(mem_t[i]))]) ** 2 for i, z in enumerate(mem_rows)])
    want = want + 0.7 * squares.mean()
    if name == "derpp":
        if scenario == "class":
            want = want + 0.4 * ce(torch.stack(mem_rows)[:, :seen], mem_y)
        else:
            targets = mem_y - torch.tensor(method.info.offsets)[mem_t]
            want = want + 0.4 * torch.stack([ce(z[None], targets[i: i + 1]) for i, z in enumerate(mem_rows)]).mean()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_derpp_draws_its_two_memory_batches_independently():
    method, tasks = build("method=derpp", "method.replay_batch_size=8", *TINY)
    fill(method.memory, method, 1, 200, torch.Generator().manual_seed(2))
    draws = []
    sample = method.memory.sample_distinct
    method.memory.sample_distinct = lambda *a, **k: draws.append(sample(*a, **k)) or draws[-1]
    loss = capture_loss(method, tasks[1])["loss"]
    raw, y, t = current_batch(tasks[1], 5)
    loss(Batch(raw, method.info.view.eval(raw), y, t, step=0))
    assert len(draws) == 2
    assert not torch.equal(draws[0][0], draws[1][0])


def test_memory_draws_distinct_samples_and_every_one_while_few_are_stored():
    mem = Memory(50, (1, 1, 1), 3, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    ids = torch.arange(30)
    mem.add(ids.to(torch.uint8).view(-1, 1, 1, 1), ids % 3, torch.zeros_like(ids), generator=g)
    x, _, _, _, drawn = mem.sample_distinct(20, g)
    assert drawn.all() and len(set(x.flatten().tolist())) == 20
    x, _, _, _, drawn = mem.sample_distinct(40, g)  # only 30 stored: all of them, the rest weighed out
    assert drawn.tolist() == [True] * 30 + [False] * 10
    assert sorted(x[:30].flatten().tolist()) == list(range(30))


@pytest.mark.parametrize("outputs, read", [("all", 10), ("seen", 4)])
def test_er_ace_masks_the_incoming_batch_to_present_and_unmet_classes(outputs, read):
    """Task 1 (classes 2, 3): the stream has met 0, 1, 2 and the batch holds only class 2, so its loss keeps
    output 2 (present) and those not met yet (3 and, as AML's and Mammoth's 10-way head, the future tasks' 4-9;
    ce_outputs=seen: 3 alone); 0 and 1 get no gradient from it. The replay loss is plain CE over the outputs read
    (all 10, or the four seen), here on a memory holding exactly one replay batch."""
    method, tasks = build("method=er_ace", "scenario=class", "method.replay_batch_size=6",
                          f"method.ce_outputs={outputs}", *TINY)
    g = torch.Generator().manual_seed(3)
    mem_raw, mem_y, _, _ = fill(method.memory, method, 1, 6, g)
    method.stream_classes[:3] = True
    loss = capture_loss(method, tasks[1])["loss"]
    task = tasks[1]
    raw = task.train.x[task.train.y == 2][:5]
    y = torch.full((len(raw),), 2)
    view = method.info.view.eval
    batch = Batch(raw, view(raw), y, torch.ones_like(y), step=0)
    got = loss(batch)

    z = method.heads.head(method.backbone(view(raw)))
    want = ce(z[:, 2:read], torch.zeros_like(y))
    want = want + ce(method.heads.head(method.backbone(view(mem_raw)))[:, :read], mem_y)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)

    method.replay_loss = lambda: torch.zeros(())  # the incoming part alone
    method.zero_grad()
    loss(batch).backward()
    grad = method.heads.head.weight.grad.abs().sum(1)
    assert grad[[0, 1]].tolist() == [0, 0] and (grad[2:read] > 0).all() and grad[read:].sum() == 0
    assert method.stream_classes.tolist() == [True] * 3 + [False] * 7


@pytest.mark.parametrize("task_free, replays", [(True, 1), (False, 0)])
def test_er_ace_replays_in_the_first_task_only_task_free(task_free, replays):
    """AML runs ER-ACE task-free: replay from the second step of task 0; Mammoth's waits for task 1."""
    method, tasks = build("method=er_ace", "scenario=class", f"method.task_free={task_free}", *TINY)
    calls = []
    method.replay_loss = lambda: calls.append(1) or torch.zeros(())
    loss = capture_loss(method, tasks[0])["loss"]
    raw, y, t = current_batch(tasks[0], 4)
    loss(Batch(raw, method.info.view.eval(raw), y, t, step=0))
    assert calls == []  # an empty memory before the stream's first step
    loss(Batch(raw, method.info.view.eval(raw), y, t, step=1))
    assert len(calls) == replays


# Their runs in each scenario, the contract, the memory recorded and learning above chance: their trials
# (test_method_contract.py)


def test_er_ace_refuses_the_task_scenario_and_a_memory_below_the_classes():
    with pytest.raises(methods.UserError, match="method=er_ace does not support scenario=task"):
        methods.check_scenario("er_ace", "task")
    for name in ("der", "derpp", "er_ace"):
        with pytest.raises(methods.UserError, match=r"method.memory_size=5 is below the 10 classes .* at least 10"):
            build(f"method={name}", "scenario=class", "method.memory_size=5")


def test_er_ace_scores_with_the_official_cosine_head():
    """AML's ER-ACE model (main.py:112-117) ends in distLinear (model.py:17-35): 10 · x/(|x| + 1e-5) · (w_c/(|w_c| +
    1e-5)), no bias. By hand: x = (3, 4), rows (1, 0) and (0, 2): 10 · (0.6, 0.8) up to the 1e-5s."""
    from cl_bench.methods.er_ace import CosineLinear
    head = CosineLinear(2, 2)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    want = 10 * torch.tensor([[3 / (5 + 1e-5) * 1 / (1 + 1e-5), 4 / (5 + 1e-5) * 2 / (2 + 1e-5)]])
    torch.testing.assert_close(head(torch.tensor([[3.0, 4.0]])), want)
    assert want[0].tolist() == pytest.approx([6.0, 8.0], abs=1e-3)

    method, tasks = build("method=er_ace", "scenario=class", *TINY)
    assert isinstance(method.heads.head, CosineLinear) and not any("bias" in n for n, _ in
                                                                    method.heads.head.named_parameters())
    method.heads.seen = method.info.seen_outputs(1)
    x = method.info.view.eval(tasks[1].train.x[:5])
    f, w = method.backbone(x), method.heads.head.weight
    torch.testing.assert_close(method(x, None), 10 * (f / (f.norm(dim=1, keepdim=True) + 1e-5))
                               @ (w / (w.norm(dim=1, keepdim=True) + 1e-5)).t()[:, :4])
    plain, _ = build("method=er_ace", "scenario=class", "method.head=linear", *TINY)
    assert isinstance(plain.heads.head, torch.nn.Linear)
