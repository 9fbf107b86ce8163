"""Methods on the registered backbones, paid once per fact (issue 47): every pair a capability rules out is refused in
one line that names it (backbones/base.py); of the others, each family of backbone use (Traits.backbone_use: the
converter that rewrites the backbone, or the functional transforms that run it) learns two tasks under debug=fast
on every backbone but the one every method's trials learn on (TRIALS', test_method_contract.py: the embedded
digits' convnet, in every scenario the method declares) and those that build another's network (SAME_NETWORK), and
scores them, through the methods in REPRESENTATIVES.

The pairs run on CIFAR-10's canonical files written here (random pixels: 3x32x32 inputs, which every backbone
takes), in a scenario the method supports, with the backbones at small widths and shape=true on top of debug=fast,
so that every phase a method runs (CPG's goal models, growth, each compacting target and refit) is one batch."""
import dataclasses
import math

import pytest

from cl_bench import api, backbones, methods
from cl_bench.backbones.base import Capability
from cl_bench.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")
SMALL = {"mlp": ["backbone.hidden_sizes=[16]"], "convnet": ["backbone.channels=[4,4]"], "resnet18": ["backbone.nf=4"],
         "resnet18_reduced": ["backbone.nf=4"], "vgg16_bn": ["backbone.hidden=8", "backbone.width=0.0625"],
         "pc_cnn": ["backbone.channels=4"]}
# debug=fast trains one batch of method.batch_size samples per task: 8 here
FAST = ["dataset=split_cifar10", "dataset.num_tasks=2", "debug=fast", "shape=true", "method.batch_size=8",
        "dataset.val_samples_per_task=4", "logger=none"]


def test_every_backbone_is_small_here():
    assert set(SMALL) == set(backbones.BACKBONES)


def missing(method: str, backbone: str) -> list[str]:
    """The capabilities the method needs (with its default remove_final_relu) that the backbone lacks."""
    cls = methods.get(method)
    needs = set(cls.needs_for(cls.Config())) | ({Capability.final_relu_switch}
                                                 if getattr(cls.Config, "remove_final_relu", False) else set())
    return sorted(needs - set(backbones.BACKBONES[backbone][0].capabilities))


# Per family of backbone use, the methods that run it on every backbone: plain use by finetune (the others of the
# family call the backbone as it does), the masked layers by each of their three methods (pruning, real-valued
# scores, growth), torch.func by EWC's per-sample gradients (MAS's are the same transform) and La-MAML's fast
# weights.
REPRESENTATIVES = {"": ("finetune",), "masked": ("cpg", "packnet", "piggyback"), "functional": ("ewc", "lamaml")}


TRIALS = "convnet"  # the backbone of the trials: every method learns on it there
# A backbone that is another's class at another default width, which SMALL sets alike: its pairs would train the
# same network again (issue 74), so they train on the other alone
SAME_NETWORK = {"resnet18_reduced": "resnet18"}


def trained_here(method: str, backbone: str) -> bool:
    use = methods.get(method).traits.backbone_use
    return backbone not in (TRIALS, *SAME_NETWORK) and method in REPRESENTATIVES.get(use, (method,))


def test_a_backbone_whose_pairs_are_left_out_builds_the_network_of_the_one_they_train_on():
    for name, other in SAME_NETWORK.items():
        (cls, schema), (other_cls, other_schema) = backbones.BACKBONES[name], backbones.BACKBONES[other]
        assert cls is other_cls and SMALL[name] == SMALL[other]
        fields = {f.name for f in dataclasses.fields(schema)}
        assert fields == {f.name for f in dataclasses.fields(other_schema)}
        differing = {f for f in fields if getattr(schema, f) != getattr(other_schema, f)}
        assert differing == {"name", "nf"} and all(o.startswith("backbone.nf=") for o in SMALL[name]), differing


def test_every_family_of_backbone_use_is_represented_and_the_trials_run_on_their_backbone():
    uses = {cls.traits.backbone_use for cls in methods.METHODS.values()}
    assert uses == {"", "masked", "functional", "gated", "calibrated", "hat", "final_relu"}
    for use in uses:
        members = [name for name, cls in methods.METHODS.items() if cls.traits.backbone_use == use]
        assert any(trained_here(name, b) for name in members for b in backbones.BACKBONES if not missing(name, b)), use
    assert api.compose("method=finetune").backbone.name == TRIALS


# A pair that trains is a whole run (slow); a refused one is a contract check `make test-fast` keeps.
PAIRS = [pytest.param(method, backbone, marks=() if missing(method, backbone) else pytest.mark.slow)
         for method in sorted(methods.METHODS) for backbone in sorted(backbones.BACKBONES)
         if missing(method, backbone) or trained_here(method, backbone)]


@pytest.mark.parametrize(("method", "backbone"), PAIRS)
def test_each_pair_learns_under_debug_fast_or_names_the_missing_capability(method, backbone, cifar10, tmp_path):
    scenario = "task" if "task" in methods.get(method).traits.scenarios else "class"
    args = [f"method={method}", f"backbone={backbone}", *SMALL[backbone], *FAST, f"scenario={scenario}",
            f"data.root={cifar10}"]
    lacks = missing(method, backbone)
    if lacks:
        with pytest.raises(UserError, match=rf"method={method}.* \(capability {lacks[0]}\); .* use backbone=") as err:
            api.run(tmp_path, *args)
        assert "\n" not in str(err.value)
        return
    metrics = api.run(tmp_path, *args)
    assert metrics["complete"] and len(metrics["acc"]) == 2
    assert all(0 <= acc <= 1 and math.isfinite(acc) for acc in metrics["acc"][-1])
    assert {phase["name"] for task in metrics["shape"]["tasks"] for phase in task["phases"]}, "no phase ran"
