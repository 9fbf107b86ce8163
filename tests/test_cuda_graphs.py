"""hardware.cuda_graphs (issue 46): a phase's full-size steps captured once as a CUDA graph and replayed
(methods/loop.py StepGraph). Without a CUDA device the StepGraph runs the same steps eagerly through the same static
buffers, with the same warm-up, capture points and recaptures: these tests hold that path to training without it,
bit for bit, for every method that declares its steps capture-safe, and check what a run records. The capture
itself is timed and checked against eager steps on a GPU (scripts/gpu_check.py, its graphs section)."""
import dataclasses
import inspect
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from cl_bench import api, hardware
from cl_bench.errors import UserError
from cl_bench.methods import METHODS
from cl_bench.methods.loop import Loop, StepGraph, tensors

pytestmark = pytest.mark.usefixtures("one_thread")
SAFE = sorted(name for name, cls in METHODS.items() if cls.traits.graph_safe is True)
PHASED = sorted(name for name, cls in METHODS.items() if cls.traits.graph_safe is not True and cls.traits.graph_phases)
# What makes a method run the phases it captures: CPG's goal models (its short schedule has none)
EXTRA = {"cpg": ("method.goal_source=independent",)}
# Two tasks, two epochs with the lr cut after the first (a recapture), and batches of 48, which leave each epoch a
# smaller last batch (an eager step between replays).
CUT = ("dataset.num_tasks=2", "logger=none", "checkpoint.enabled=false", "method.epochs=2", "method.lr_milestones=[1]",
       "method.batch_size=48")
# A small MLP, or a small conv net for the methods that gate convs
BACKBONE = ("backbone=mlp", "backbone.hidden_sizes=[32]")
CONV = {"gated": ("backbone=convnet", "backbone.channels=[4,8]")}


def composed(name: str, *overrides: str):
    """CUT for method name, in the task scenario where it has one, its extra phases cut short."""
    cls = METHODS[name]
    scenario = "task" if "task" in cls.traits.scenarios else "class"
    return api.compose(f"method={name}", f"scenario={scenario}", *CONV.get(name, BACKBONE), *CUT,
                       *cls.traits.short_schedule, *EXTRA.get(name, ()), *overrides)


def trained(name: str, *overrides: str):
    torch.manual_seed(0)
    exp = api.build(composed(name, *overrides))
    for task in exp.tasks:
        exp.method.learn(task)
    return exp


@pytest.fixture
def graphs(monkeypatch) -> list[StepGraph]:
    """The StepGraphs the phases make, kept to be read after training."""
    made, make = [], Loop.step_graph

    def keep(self, *args):
        graph = make(self, *args)
        if graph is not None:
            made.append(graph)
        return graph
    monkeypatch.setattr(Loop, "step_graph", keep)
    return made


def test_some_methods_declare_their_steps_capture_safe_and_the_rest_say_why_not():
    assert {"finetune", "joint", "ewc", "lwf", "packnet", "icarl", "er", "der", "derpp", "er_ace"} <= set(SAFE)
    assert PHASED == ["cpg"]
    assert all(isinstance(cls.traits.graph_safe, str) and cls.traits.graph_safe for name, cls in METHODS.items()
               if name not in SAFE)


# Each method that captures trains graphed as eager, bit for bit, its replays audited: its trial's re-run
# (test_method_contract.py).


def test_a_step_is_captured_afresh_when_what_its_branches_read_of_the_step_index_changes(graphs, monkeypatch):
    """Gated's sparsity term starts after a warm-up epoch, within a phase whose learning rate stays: its graph_key
    turns, and the step is captured again, as the eager loop branches."""
    warm = ("method.sparsity_warmup_epochs=1", "method.lr_milestones=[]")
    eager = trained("gated", *warm).method.state_dict()
    graphed, audit = audited("gated", monkeypatch, *warm)
    assert all(torch.equal(eager[k], v) for k, v in graphed.method.state_dict().items())
    assert all(g.captures == 2 for g in graphs) and audit.replays > 0 and not audit.problems, audit.problems[:5]


def test_a_step_graph_copies_each_batch_into_its_buffers_and_sums_the_epoch_in_place(graphs):
    exp = trained("finetune", "hardware.cuda_graphs=true", "method.epochs=1", "method.lr_milestones=[]")
    graph = graphs[-1]
    task = exp.tasks[-1].train
    assert graph.static.x.shape[0] == 48 and graph.static.x.data_ptr() != task.x.data_ptr()
    steps = -(-len(task) // 48)
    assert int(graph.step_index) == steps - 2  # the last full batch's index: the smaller last one ran eagerly
    assert graph.total.item() > 0 and int(graph.first_bad) == -1


def test_the_record_says_whether_steps_were_captured_and_why_not():
    hw = hardware.Hardware(torch.device("cpu"), None, False)
    assert hardware.graph_mode(False, METHODS["finetune"], hw) == (False, "off")
    granted, record = hardware.graph_mode(True, METHODS["finetune"], hw)
    assert granted and record.startswith("not captured: no CUDA device")
    granted, record = hardware.graph_mode(True, METHODS["gdumb"], hw)
    why = METHODS["gdumb"].traits.graph_safe
    assert not granted and record == f"not captured: gdumb's steps are not capture-safe ({why})"
    cuda = hardware.Hardware(torch.device("cuda"), torch.bfloat16, True)
    assert hardware.graph_mode(True, METHODS["finetune"], cuda) == (True, "captured")
    granted, record = hardware.graph_mode(True, METHODS["cpg"], cuda)
    assert granted and record.startswith("captured in its goal phases only")
    assert hardware.graph_mode(True, METHODS["finetune"], hardware.Hardware(torch.device("cuda"), None, True,
                                                                            world_size=2))[0] is False
    exp = api.build(composed("gdumb", "hardware.cuda_graphs=true", "method.lr_milestones=[]"))
    assert not exp.ctx.cuda_graphs and exp.ctx.ran_on["cuda_graphs"].startswith("not captured: gdumb's")


def test_graphs_and_a_compiled_backbone_together_are_refused_in_one_line():
    with pytest.raises(UserError, match="hardware.cuda_graphs") as refused:
        api.compose("hardware.cuda_graphs=true", "hardware.compile=true")
    assert "\n" not in str(refused.value)


# --- what a graph would replay, checked on the CPU -----------------------------------------------------------------
TORCH_OPTIM = str(Path(torch.optim.__file__).parent)
OURS = (__file__, torch.overrides.__file__)


class ReplayAudit(TorchFunctionMode):
    """A CUDA graph replays the kernels its capture launched, with the pointers and the numbers they had then. On
    the CPU this records the torch calls of each StepGraph's captured step (each function, its Python values, its
    tensors' shapes and dtypes, and the address of each persistent tensor it reads: a parameter, a buffer, optimiser
    state, the graph's own buffers) and compares every later replay's with them. A replay that calls otherwise
    (another Python number, a branch taken otherwise, a buffer replaced by a new tensor, another shape) is one a
    graph would get wrong; so is a draw from a generator the graph does not register (StepGraph.generators: the
    run's), which its replays would not advance.
    torch.optim's own calls are left out: which optimisers capture is torch's (Adam and AdamW capturable, SGD)."""

    def __init__(self, method):
        super().__init__()
        self.method, self.active, self.calls, self.index = method, False, [], 0
        self.replays, self.problems = 0, []

    def begin(self, graph: StepGraph, record: bool) -> None:
        state = [t for st in graph.opt.state.values() for t in st.values() if isinstance(t, torch.Tensor)]
        persistent = [*self.method.parameters(), *self.method.buffers(), *state, *tensors(graph.static),
                      graph.total, graph.first_bad, graph.step_index]
        self.persistent = {t.data_ptr() for t in persistent if t.numel()}
        self.registered = {id(g) for g in graph.generators}
        self.record, self.index, self.active = record, 0, True
        if record:
            self.calls = []
        else:
            self.replays += 1

    def end(self) -> None:
        self.active = False
        if not self.record and self.index != len(self.calls):
            self.problems.append(f"a replay made {self.index} calls, the captured step {len(self.calls)}")

    def describe(self, x):
        if isinstance(x, torch.Tensor):
            return ("tensor", tuple(x.shape), x.dtype, x.data_ptr() if x.data_ptr() in self.persistent else None)
        if isinstance(x, (list, tuple)):
            return tuple(self.describe(v) for v in x)
        if isinstance(x, dict):
            return tuple((k, self.describe(v)) for k, v in sorted(x.items()))
        if isinstance(x, torch.Generator):
            if id(x) not in self.registered:
                self.problems.append("a step draws from a generator the graph does not register")
            return ("generator", id(x))
        if x is None or isinstance(x, (bool, int, float, str, torch.dtype, torch.device, torch.memory_format)):
            return x
        return type(x).__name__

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.active and not by_optimiser():
            call = (getattr(func, "__name__", str(func)), self.describe(args), self.describe(kwargs))
            if self.record:
                self.calls.append(call)
            elif self.index >= len(self.calls) or self.calls[self.index] != call:
                self.problems.append(f"call {self.index} of a replay: {call[0]} where the captured step made "
                                     f"{self.calls[self.index][0] if self.index < len(self.calls) else 'none'}, "
                                     f"or with other values")
            self.index += 1
        return func(*args, **kwargs)


def by_optimiser() -> bool:
    frame = inspect.currentframe().f_back
    while frame.f_code.co_filename in OURS:
        frame = frame.f_back
    return frame.f_code.co_filename.startswith(TORCH_OPTIM)


def audit_replays(patch, audit: ReplayAudit) -> None:
    """Marks each capture, so that audit holds each replay's calls to what the capture's were."""
    capture, replay = StepGraph._capture, StepGraph._replay

    def captured(graph):
        capture(graph)
        graph.fresh = True

    def replayed(graph):
        audit.begin(graph, record=getattr(graph, "fresh", False))
        graph.fresh = False
        replay(graph)
        audit.end()
    patch.setattr(StepGraph, "_capture", captured)
    patch.setattr(StepGraph, "_replay", replayed)


def audited(name: str, monkeypatch, *overrides: str):
    """A graphed run of method name on the CPU, its replays audited: (the experiment, its ReplayAudit)."""
    torch.manual_seed(0)
    exp = api.build(composed(name, "hardware.cuda_graphs=true", *overrides))
    audit = ReplayAudit(exp.method)
    audit_replays(monkeypatch, audit)
    with audit:
        for task in exp.tasks:
            exp.method.learn(task)
    return exp, audit


def counted(loss):
    """Finetune's loss scaled by a number that grows each call: a Python value that changes from step to step."""
    calls = []

    def scaled(self, batch, task_id):
        calls.append(None)
        return loss(self, batch, task_id) * (1 + len(calls) / 1000)
    return scaled


def replaced(loss):
    """Finetune's loss scaled by a buffer that each step replaces with a new tensor for the next one."""
    def scaled(self, batch, task_id):
        if not hasattr(self, "factor"):
            self.register_buffer("factor", torch.ones(()))
        out = loss(self, batch, task_id) * self.factor
        self.factor = torch.ones(())  # the captured step read the tensor this attribute named then
        return out
    return scaled


def branched(loss):
    """Finetune's loss with a term added on even steps only: a branch on batch.step, which a graph holds fixed."""
    def scaled(self, batch, task_id):
        out = loss(self, batch, task_id)
        return out * 2 if batch.step % 2 else out
    return scaled


def unregistered(loss):
    """Finetune's loss plus noise from a generator of its own, which no graph registers."""
    def noisy(self, batch, task_id):
        if not hasattr(self, "own_generator"):
            self.own_generator = torch.Generator().manual_seed(1)
        return loss(self, batch, task_id) + 1e-3 * torch.rand((), generator=self.own_generator)
    return noisy


@pytest.mark.parametrize(("name", "patch", "why"), [
    ("finetune", unregistered, "a step draws from a generator the graph does not register"),
    ("finetune", counted, "call "),
    ("finetune", replaced, "call "),
    ("finetune", branched, "call ")])
def test_the_replay_audit_finds_steps_a_graph_would_get_wrong(name, patch, why, monkeypatch):
    if patch is not None:
        monkeypatch.setattr(METHODS[name], "loss", patch(METHODS[name].loss))
    monkeypatch.setattr(METHODS[name], "traits", dataclasses.replace(METHODS[name].traits, graph_safe=True))
    _, audit = audited(name, monkeypatch)
    assert audit.replays > 0 and any(problem.startswith(why) for problem in audit.problems), audit.problems[:5]
