"""No host-device synchronisation inside a training step (issue 46): every method runs a few steps of each of its
phases (CPG's goal model, compaction and refit, La-MAML's glances and outer steps, NCCL's inner and outer steps,
gated's phases, BiC's bias correction) under a TorchFunctionMode that counts the calls which, on a GPU, make the
host wait for the device: reading a value (item, tolist, bool/int/float/index of a tensor, printing one), a result
whose size depends on the data (nonzero and the like, boolean-mask indexing), a copy to the host (cpu, numpy,
.to("cpu")) and a tensor built from Python data. On a CPU none of them waits, but each is where a GPU would.
A step is what loop.in_step() marks: each batch of loop.py's epoch loop (its augmentation, the forward, backward and
optimiser step, the hooks around them), each batch of online.py's stream (its glances and its storing; the stream
augments a batch as it is drawn, outside the mark, with the same code the epoch loop audits) and BiC's bias
correction steps.

What the mode sees: every torch function and Tensor method called from Python, but not what one does within (the
mode is off while a call it intercepted runs: what F.cross_entropy calls, in Python or C++, is not seen). So x[mask]
is seen as __getitem__ with a boolean index, which the mode counts as the nonzero it calls; torch functions whose
result size depends on the data are named in DATA_SIZED. A call made by torch's own Python code that is no torch
function (an optimiser's step) is seen too, which is why STEP_COUNTERS is excepted. Outside a step (epoch and task
ends, evaluation, checkpoints) the same calls are counted apart and allowed."""
import collections
import inspect
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

import cl_bench
from cl_bench import api, methods
from cl_bench.methods import loop
from cl_bench.nn import masked

pytestmark = pytest.mark.usefixtures("one_thread")
PACKAGE = str(Path(cl_bench.__file__).parent)
TORCH_OPTIM = str(Path(torch.optim.__file__).parent)

READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__complex__", "__format__", "__repr__",
         "is_nonzero", "equal", "allclose", "cpu", "numpy", "__array__"}
DATA_SIZED = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount"}
BUILT = {"tensor", "as_tensor", "asarray"}
# Non-capturable optimisers (torch.optim's default) keep each parameter's step count in a host tensor, made and read
# (Adam's bias correction): a read of host memory, no wait for the device.
STEP_COUNTERS = {"item", "__float__", "tensor(python data)"}

# Syncs inside a step that stay, each because removing it would change what the method computes: (method, call,
# site) -> why. The test fails on any sync inside a step not listed here. None today: each one found was removed
# (issue 46: CPG's and PackNet's mask decisions and release, GDumb's CutMix draw).
ALLOWED: dict[tuple[str, str, str], str] = {}


def is_mask(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype in (torch.bool, torch.uint8) for p in parts)


def sync_kind(func, args, kwargs) -> str | None:
    """The kind of host sync a torch call is, or None."""
    name = getattr(func, "__name__", "")
    if name in READS or name in DATA_SIZED:
        return name
    if name == "where" and len(args) + len(kwargs) == 1:
        return "where(condition)"  # torch.where's one-argument form is nonzero
    if name == "repeat_interleave" and isinstance(args[1] if len(args) > 1 else kwargs.get("repeats"), torch.Tensor) \
            and "output_size" not in kwargs:
        return "repeat_interleave"
    # .to(torch.device("cpu")) is not told apart: here the run's own device is one, and moving there is no sync
    if name == "to" and any(isinstance(a, str) and a == "cpu" for a in (*args[1:], kwargs.get("device"))):
        return "to(cpu)"
    if name in BUILT and args and not isinstance(args[0], torch.Tensor):
        return f"{name}(python data)"
    if name == "__getitem__" and is_mask(args[1]):
        return "mask index"  # the nonzero of the mask, in C++
    if name in ("__setitem__", "index_put_", "index_put") and is_mask(args[1]):
        value = args[2]
        # a mask assigned one value is a masked_fill (no sync); assigned many, the nonzero of the mask
        return "mask assign" if isinstance(value, torch.Tensor) and value.numel() > 1 else None
    return None


def site() -> tuple[str, bool]:
    """Where the call was made, as `file:line function` of the nearest frame in cl_bench, and whether torch.optim
    made it."""
    frame = inspect.currentframe().f_back
    while frame.f_code.co_filename in (__file__, torch.overrides.__file__):  # this audit, torch's dispatch
        frame = frame.f_back
    by_optim = frame.f_code.co_filename.startswith(TORCH_OPTIM)
    while frame is not None and not frame.f_code.co_filename.startswith(PACKAGE):
        frame = frame.f_back
    if frame is None:
        return "outside cl_bench", by_optim
    return f"{Path(frame.f_code.co_filename).relative_to(PACKAGE)}:{frame.f_lineno} {frame.f_code.co_name}", by_optim


class SyncAudit(TorchFunctionMode):
    """Counts host syncs by (kind, site), inside a step and outside it apart."""

    def __init__(self):
        super().__init__()
        self.inside, self.outside = collections.Counter(), collections.Counter()
        self.within = collections.Counter()  # the torch calls made inside a step, by name

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = sync_kind(func, args, kwargs)
        if loop.stepping():
            self.within[getattr(func, "__name__", "")] += 1
        if kind is not None:
            where, by_optim = site()
            if not (by_optim and kind in STEP_COUNTERS):
                (self.inside if loop.stepping() else self.outside)[kind, where] += 1
        return func(*args, **kwargs)


def syncs_of(work) -> tuple[dict, dict]:
    """The syncs work() makes, counted by kind, inside a step and outside it."""
    with SyncAudit() as audit:
        work()
    return ({kind: n for (kind, _), n in audit.inside.items()}, {kind: n for (kind, _), n in audit.outside.items()})


def every_kind():
    x = torch.arange(4.0)
    mask = x > 1
    x[0].item()
    bool(x[1]), int(x[1]), float(x[1]), [0, 1][x[1].long()], x.tolist()
    x.nonzero(), torch.where(mask), x[mask], x.cpu(), x.to("cpu"), x.numpy(), torch.tensor([1.0, 2.0])
    x[mask] = torch.ones(2)  # many values under a mask: nonzero
    x[mask] = 0.0  # one value: a masked_fill, no sync
    torch.as_tensor(x), x.to(torch.float64), x[x.long() % 2]  # no sync either: a tensor, a cast, a gather


def test_the_audit_counts_each_kind_of_sync_inside_a_step_and_apart_outside():
    kinds = {"item": 1, "__bool__": 1, "__int__": 1, "__float__": 1, "__index__": 1, "tolist": 1, "nonzero": 1,
             "where(condition)": 1, "mask index": 1, "cpu": 1, "to(cpu)": 1, "numpy": 1, "tensor(python data)": 1,
             "mask assign": 1}

    def in_a_step():
        with loop.in_step():
            every_kind()
    assert syncs_of(in_a_step) == (kinds, {})
    assert syncs_of(every_kind) == ({}, kinds)


def test_an_optimiser_step_counts_no_sync_though_it_reads_its_host_step_counter():
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([w], foreach=False)  # the single-tensor path reads the step counter with item()

    def step():
        with loop.in_step():
            (w * 2).sum().backward()
            opt.step()
    assert syncs_of(step) == ({}, {})


def test_masked_layers_release_and_mask_within_a_step_without_a_sync():
    """CPG's ramp within a step: the pool's size from the census, the cutoff ranked without a gather, the trivial
    masks decided on the host; the owners as the gathered kthvalue's cutoff leaves them."""
    torch.manual_seed(0)
    layer = masked.MaskedLinear(torch.nn.Linear(8, 6), 2, (1e-2, 5e-3))
    layer.claim(0)
    layer.release(0, 0.25)  # some free weights in the pool, with the values they held
    layer.claim(1)
    with torch.no_grad():  # the weights task 1 claims were zeroed: values of their own, no ties
        layer.weight.add_(torch.randn_like(layer.weight))
    layer.release(1, 0.25, cutoff=True)  # free weights that keep their values, in the pool ranked below
    layer.start_picking(1)
    layer.task = 1
    magnitude, pool = layer.weight.detach().abs(), layer.owner != 1
    kth = magnitude[pool].kthvalue(round(0.5 * int(pool.sum()))).values
    want = layer.owner.masked_fill((magnitude <= kth) & (layer.owner == 2), 0)

    def step():
        with loop.in_step():
            layer(torch.ones(2, 8)).sum().backward()
            layer.trainable_mask(1)
            layer.release(1, 0.5, cutoff=True)
            layer(torch.ones(2, 8)).sum().backward()
            layer.trainable_mask(1)
    inside, _ = syncs_of(step)
    assert inside == {}
    assert torch.equal(layer.owner, want) and (want == 0).any() and (want == 2).any()
    assert layer.census().present() == {0, 1, 2} and layer.census().pool(2) == int(pool.sum())


# debug=fast: two tasks of one batch; shape=true: every phase a method runs beside its epochs cut to one batch
FAST = ["debug=fast", "shape=true", "logger=none", "dataset.num_tasks=2"]
# shape=true prunes CPG at once (prune_timing=immediate's path); its default, ivclab/CPG's ramp with a cutoff,
# runs here: one batch an epoch, the masks updated after each step of a two-step ramp, every target kept (no bar
# to top), so that the next task claims the weights released and picks among the rest
CPG_RAMP = ["shape=false", "method.prune_frequency=1", "method.prune_epochs=3", "method.prune_ramp_epochs=2",
            "method.prune_targets=[0.5,0.9]", "method.retrain_epochs=1", "method.train_acc_bar=0"]
# hardware.cuda_graphs: the StepGraph's path (loop.py), which on the CPU runs eagerly what a GPU captures: five
# epochs of one batch, three of them warm-up, then a capture and a replay
GRAPHED = ["shape=false", "hardware.cuda_graphs=true", "method.epochs=5"]
# Every method's own steps are audited in its trials (test_method_contract.py); here the paths a trial does not take:
# CPG's ramp, the graphed finetune, and gated's task classifier fitted after each task (class scenario), its stacked
# forward over the first k paths
AFTER_TASK = ["scenario=class", "method.task_classifier_fit=after_task", "method.task_classifier_epochs=1"]
CASES = {"cpg_ramp": ("cpg", CPG_RAMP), "finetune_graphed": ("finetune", GRAPHED),
         "gated_after_task": ("gated", AFTER_TASK)}
# A call a case must make within a step, lest the audit pass over the path it is there for: CPG's release of
# weights, by its ramp's cutoff or by count; the StepGraph's copy of each batch into its buffers
WITHIN = {"cpg_ramp": "kthvalue", "finetune_graphed": "copy_"}


def audited_run(method: str, tmp_path, *overrides: str) -> SyncAudit:
    scenario = "task" if "task" in methods.get(method).traits.scenarios else "class"
    chosen = [] if any(o.startswith("scenario=") for o in overrides) else [f"scenario={scenario}"]
    with SyncAudit() as audit:
        api.run(tmp_path, f"method={method}", *chosen, *FAST, *overrides)
    return audit


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_host_sync_inside_a_training_step(case, tmp_path):
    method, overrides = CASES[case]
    audit = audited_run(method, tmp_path, *overrides)
    assert audit.within.total(), "the audit saw no training step"
    assert case not in WITHIN or audit.within[WITHIN[case]], f"no step called {WITHIN.get(case)}"
    found = {(kind, where): n for (kind, where), n in audit.inside.items() if (method, kind, where) not in ALLOWED}
    assert not found, f"host syncs inside {case}'s training steps (kind, site: count): {found}"


# The same audit under hardware=ddp, in each of two ranks: test_ddp.py (one torchrun launch with its agreement runs)
