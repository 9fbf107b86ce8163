"""One-line refusals of what a run would not read, and of misspelt keys and choices, each naming what is near."""
import sys
from pathlib import Path

import pytest

from cl_bench import config, methods, settings
from cl_bench.errors import UserError

sys.path.insert(0, str(Path(__file__).parent))
from test_settings import setting_command  # noqa: E402

config.register()


def refusal(*overrides: str) -> str:
    with pytest.raises(UserError) as caught:
        config.validate(config.compose(list(overrides)))
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("overrides, key, nearest, own", [
    (["method=cpg", "method.lr_msk=1e-3"], "method.lr_msk", "method.mask_lr", "mask_lr_gamma"),
    (["dataset=split_cifar10", "dataset.num_taks=3"], "dataset.num_taks", "dataset.num_tasks", "class_order"),
    (["backbone=resnet18", "backbone.nff=3"], "backbone.nff", "backbone.nf", "stem")])
def test_an_unknown_key_lists_the_chosen_groups_own_keys_nearest_first(overrides, key, nearest, own):
    message = refusal(*overrides)
    assert f"unknown key '{key}' (did you mean {nearest}?)" in message
    listed = message.split(" has ", 1)[1].split(", ")
    assert listed[0] == nearest.split(".")[1] and own in listed
    assert overrides[0] in message  # the choice whose keys these are


def test_an_unknown_method_key_is_not_answered_with_finetunes_keys():
    assert "mask_lr" in refusal("method=cpg", "method.nope=1") and "memory_size" in refusal("method=er", "method.x=1")


@pytest.mark.parametrize("override, nearest", [("method=cgp", "cpg"), ("dataset=split_cifr10", "split_cifar10"),
                                               ("backbone=resnt18", "resnet18")])
def test_an_unknown_choice_names_the_nearest(override, nearest):
    group, name = override.split("=")
    message = refusal(override)
    assert message.startswith(f"unknown {group} '{name}' (did you mean {nearest}?): choose one of {nearest}, ")
    said = config.unknown_choice(["seed=3", override, "method.lr=0.1"])  # the line for Hydra's bare ValueError
    assert said.startswith(f"unknown {group} '{name}' (did you mean {nearest}?): choose one of {nearest}, ")
    assert config.unknown_choice(["seed=3", f"{group}={nearest}", "method.lr=0.1"]) is None


@pytest.mark.parametrize("overrides, refused", [
    (["method.optimizer=adam", "method.momentum=0.5"], "method.momentum=0.5"),
    (["method.optimizer=adamw", "method.nesterov=true"], "method.nesterov=true"),
    (["method=gated", "method.momentum=0.5"], "method.momentum=0.5"),  # gated's own default optimiser is Adam
    (["method.lr_gamma=0.5"], "method.lr_gamma=0.5"),
    (["checkpoint.enabled=false", "checkpoint.keep=all"], "checkpoint.keep=all")])
def test_a_key_the_run_would_not_read_is_refused(overrides, refused):
    message = refusal(*overrides)
    assert message.startswith(f"{refused} is not read") and "drop it" in message


@pytest.mark.parametrize("overrides, said", [
    (["eval_future=true", "scenario=class"], "eval_future=true in the class scenario needs tasks that share labels "
     "(permuted_mnist, rotated_mnist): a future task's classes have no outputs yet; use scenario=task"),
    (["checkpoint.enabled=false", "checkpoint.every_epochs=1"],
     "checkpoint.every_epochs needs checkpoint.enabled=true"),
])
def test_a_combination_the_run_cannot_honour_is_refused(overrides, said):
    assert refusal(*overrides) == said


@pytest.mark.slow  # a process each
@pytest.mark.parametrize("overrides, refused", [
    (["method=gated", "method.momentum=0.9"], "method.momentum=0.9"),
    (["method.lr_gamma=0.1"], "method.lr_gamma=0.1"),
    (["checkpoint.enabled=false", "checkpoint.keep=1"], "checkpoint.keep=1")])
def test_a_default_value_given_on_the_command_line_is_refused_too(tmp_path, overrides, refused):
    """Named on the command line, the value is meant to change something, even where it is the default."""
    from conftest import cl_bench
    proc = cl_bench("train", *overrides, f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and proc.stderr.startswith(f"cl-bench: error: {refused} is not read")
    assert len(proc.stderr.splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides", [
    ["method.optimizer=sgd", "method.momentum=0.5", "method.nesterov=true"],
    ["method.lr_milestones=[2]", "method.lr_gamma=0.5"],
    ["method=lucir", "scenario=class", "method.lr_milestones=[]", "method.lr_gamma=0.5"],  # its fine-tuning phase
    ["method=packnet", "method.lr_milestones=[]", "method.lr_gamma=0.5"],  # its retraining phase has milestones
    ["method=bic", "scenario=class", "method.optimizer=adam", "method.momentum=0.5"],  # its stage 2 SGD reads it
    ["checkpoint.keep=all"],
    ["eval_future=true", "scenario=class", "dataset=permuted_mnist"],  # its tasks share the labels
    ["eval_future=true", "scenario=task"]])
def test_a_key_the_run_reads_is_accepted(overrides):
    config.validate(config.compose(overrides))


@pytest.mark.parametrize("name", sorted(methods.METHODS))
def test_every_methods_own_defaults_are_accepted(name):
    scenario = "task" if "task" in methods.METHODS[name].traits.scenarios else "class"
    config.validate(config.compose([f"method={name}", f"scenario={scenario}", "setting=none"]))


@pytest.mark.parametrize("name", settings.available())
def test_every_packaged_setting_composes(name):
    config.validate(config.compose(setting_command(name)))


@pytest.mark.parametrize("name", sorted(p.stem for p in (config.CONF / "experiment").glob("*.yaml")))
def test_every_packaged_experiment_composes(name):
    config.validate(config.compose([f"experiment={name}"]))


@pytest.mark.slow  # a process
def test_data_prepares_missing_files_message_names_its_own_options(tmp_path):
    """`cl-bench data prepare` takes --root and --download, not a run's data.root and data.download."""
    from conftest import cl_bench
    proc = cl_bench("data", "prepare", "mnist", "--root", str(tmp_path))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "set --root to" in proc.stderr and "add --download to fetch them" in proc.stderr
    assert "data.download" not in proc.stderr and "data.root" not in proc.stderr
