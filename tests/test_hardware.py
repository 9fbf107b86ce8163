"""hardware.*: switches that must do what they say."""
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from cl_bench import config, hardware
from cl_bench import train as train_module
from cl_bench.methods.base import fresh_copy
from cl_bench.recorders import Recorders


def test_deterministic_turns_on_pytorchs_deterministic_algorithms():
    config.register()
    cfg = OmegaConf.structured(config.HardwareConfig(device="cpu", deterministic=True))
    try:
        hardware.setup(cfg)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
    hardware.setup(OmegaConf.structured(config.HardwareConfig(device="cpu")))
    assert not torch.are_deterministic_algorithms_enabled()


def test_compile_compiles_the_backbone_in_place():
    config.register()
    for flag in (False, True):
        cfg = config.compose(["method=lwf", "logger=none", f"hardware.compile={str(flag).lower()}"])
        _, method, _ = train_module.build(cfg, Recorders([]))
        assert (method.backbone._compiled_call_impl is not None) == flag
        assert all(not k.startswith("_orig_mod") for k in method.state_dict()), "checkpoint keys unchanged"


@pytest.mark.slow
def test_a_copy_of_a_compiled_module_runs_on_its_own_weights():
    torch.manual_seed(0)
    original = nn.Linear(3, 2)
    original.compile(backend="eager")  # the wrapping is what matters here, not the compiler
    clone = fresh_copy(original)
    assert clone._compiled_call_impl is not None and clone._compiled_call_impl is not original._compiled_call_impl
    with torch.no_grad():
        clone.weight.zero_()
        clone.bias.fill_(1.0)
    x = torch.randn(4, 3)
    assert torch.equal(clone(x), torch.ones(4, 2))  # a plain deepcopy would have computed original(x)
    assert not torch.equal(original(x), torch.ones(4, 2))


def test_the_runs_evaluation_batch_reaches_its_context():
    config.register()
    for override, expected in (([], hardware.EVAL_BATCH), (["data.eval_batch_size=7"], 7)):
        _, _, ctx = train_module.build(config.compose(["method=finetune", "logger=none", *override]), Recorders([]))
        assert ctx.eval_batch_size == expected


def test_evaluation_and_the_methods_passes_read_the_runs_evaluation_batch(monkeypatch):
    """The scores do not depend on the batch, and a method's own evaluation passes (here gated's relevance) take
    the run's batch size, not a constant of their own."""
    from cl_bench.data.scenarios import Split
    config.register()
    cfg = config.compose(["method=gated", "logger=none", "data.eval_batch_size=7"])
    scenario, method, ctx = train_module.build(cfg, Recorders([]))
    task = scenario.tasks[0]
    hits = [train_module.count_correct(method, [task], [scenario.test[0]], scenario.info, ctx, size)[0].item()
            for size in (7, 1000)]
    assert hits[0] == hits[1]
    asked = []
    batches = Split.batches
    monkeypatch.setattr(Split, "batches", lambda self, size, *a: asked.append(size) or batches(self, size, *a))
    method._firing(task.val, task.id)
    assert asked and set(asked) == {7}
