"""hardware.cuda_graphs (issue 46): a phase's full-size steps captured once as a CUDA graph and replayed
(methods/loop.py StepGraph). Without a CUDA device the StepGraph runs the same steps eagerly through the same static
buffers, with the same warm-up, capture points and recaptures: these tests hold that path to training without it,
bit for bit, for every method that declares its steps capture-safe, and check what a run records. The capture
itself is timed and checked against eager steps on a GPU (scripts/gpu_check.py, its graphs section)."""
import pytest
import torch

from cl_bench import api, hardware
from cl_bench.errors import UserError
from cl_bench.methods import METHODS
from cl_bench.methods.loop import Loop, StepGraph

pytestmark = pytest.mark.usefixtures("one_thread")
SAFE = sorted(name for name, cls in METHODS.items() if cls.graph_safe is True)
# Two tasks, two epochs with the lr cut after the first (a recapture), and batches of 48, which leave each epoch a
# smaller last batch (an eager step between replays).
CUT = ("backbone=mlp", "backbone.hidden_sizes=[32]", "dataset.num_tasks=2", "scenario=task", "logger=none",
       "checkpoint.enabled=false", "method.epochs=2", "method.lr_milestones=[1]", "method.batch_size=48")


def trained(name: str, *overrides: str):
    torch.manual_seed(0)
    exp = api.build(api.compose(f"method={name}", *CUT, *overrides))
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
    assert {"finetune", "joint", "ewc", "lwf"} <= set(SAFE)
    assert all(isinstance(cls.graph_safe, str) and cls.graph_safe for name, cls in METHODS.items()
               if name not in SAFE)


@pytest.mark.parametrize("name", SAFE)
def test_a_graphed_run_trains_as_the_eager_loop_bit_for_bit(name, graphs):
    eager = trained(name).method.state_dict()
    assert not graphs
    graphed = trained(name, "hardware.cuda_graphs=true")
    assert graphed.ctx.cuda_graphs and graphs
    assert eager.keys() == graphed.method.state_dict().keys()
    assert all(torch.equal(eager[k], v) for k, v in graphed.method.state_dict().items())
    # every phase captured once, and again at its new learning rate; each epoch's smaller last batch ran eagerly
    assert all(g.captures == 2 and g.warm == StepGraph.WARMUP for g in graphs)
    assert all(g.graph is None for g in graphs)  # released with its phase


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
    granted, record = hardware.graph_mode(True, METHODS["er"], hw)
    assert not granted and record == f"not captured: er's steps are not capture-safe ({METHODS['er'].graph_safe})"
    cuda = hardware.Hardware(torch.device("cuda"), torch.bfloat16, True)
    assert hardware.graph_mode(True, METHODS["finetune"], cuda) == (True, "captured")
    assert hardware.graph_mode(True, METHODS["finetune"], hardware.Hardware(torch.device("cuda"), None, True,
                                                                            world_size=2))[0] is False
    exp = api.build(api.compose("method=er", *CUT, "hardware.cuda_graphs=true"))
    assert not exp.ctx.cuda_graphs and exp.ctx.ran_on["cuda_graphs"].startswith("not captured: er's")


def test_graphs_and_a_compiled_backbone_together_are_refused_in_one_line():
    with pytest.raises(UserError, match="hardware.cuda_graphs") as refused:
        api.compose("hardware.cuda_graphs=true", "hardware.compile=true")
    assert "\n" not in str(refused.value)
