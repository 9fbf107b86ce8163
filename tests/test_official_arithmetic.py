"""method.protocol=official computes as the official code does: plain fp32 (no bf16 autocast, no TF32) and, in the
task scenario, each task's images normalised with that task's own statistics, as ivclab/CPG normalises every
CIFAR-100 superclass task (utils/cifar100_dataset.py:8-10 and 29-31: transforms.Normalize(mean[task], std[task])
after ToTensor, the same constants for the task's training and test images)."""
import json

import numpy as np
import pytest
import torch
from conftest import quick_args
from omegaconf import OmegaConf
from test_scenarios import write_cifar100
from torchvision.transforms.v2 import functional as TF

from cl_bench import config, hardware
from cl_bench import train as train_module
from cl_bench.config import DataConfig, DatasetConfig
from cl_bench.data import scenarios
from cl_bench.errors import UserError
from cl_bench.recorders import Recorders

pytestmark = pytest.mark.usefixtures("one_thread")
config.register()


def superclass_tasks(root, per_task_norm):
    cfg = OmegaConf.structured(DatasetConfig(name="cifar100_20", source="cifar100", kind="superclass", num_tasks=20))
    data = OmegaConf.structured(DataConfig(root=str(root), val_fraction=0.25))
    return scenarios.build(cfg, data, "task", 0, torch.device("cpu"), per_task_norm=per_task_norm)


def test_each_task_is_normalised_as_torchvision_normalize_with_its_own_training_statistics(tmp_path):
    """The reference's pipeline by hand: ToTensor (x / 255), then Normalize with the per-channel mean and std of the
    task's training images (over every pixel, numpy's population std); computed here from the training split
    alone, so neither the held-out validation images nor the test images move them."""
    write_cifar100(tmp_path)
    s = superclass_tasks(tmp_path, per_task_norm=True)
    view = s.info.view
    for t in (0, 7, 19):
        pixels = s.tasks[t].train.x.numpy().astype(np.float64) / 255  # (N, 3, 32, 32)
        mean = pixels.mean(axis=(0, 2, 3))
        std = pixels.std(axis=(0, 2, 3))
        test = s.test[t].x
        want = TF.normalize(test.float() / 255, mean.tolist(), std.tolist())
        torch.testing.assert_close(view.eval(test, t), want, rtol=1e-5, atol=1e-5)
        # per-sample task ids (a mixed batch) read each sample's own row
        ids = torch.full((len(test),), t)
        torch.testing.assert_close(view.eval(test, ids), want, rtol=1e-5, atol=1e-5)
        with_val = torch.cat([s.tasks[t].train.x, s.tasks[t].val.x]).numpy().astype(np.float64) / 255
        assert not np.allclose(with_val.mean(axis=(0, 2, 3)), mean, rtol=0, atol=1e-9)  # validation left out
    assert not torch.equal(view.scale[0], view.scale[1])  # each task its own statistics
    with pytest.raises(ValueError, match="task ids"):
        view.eval(s.test[0].x)
    plain = superclass_tasks(tmp_path, per_task_norm=False).info.view
    assert not plain.per_task and torch.equal(plain.eval(s.test[3].x), plain.eval(s.test[3].x, 3))


def test_the_official_protocol_resolves_to_per_task_statistics_in_the_task_scenario_only():
    resolve = config.per_task_normalization
    assert resolve(config.compose(["method=packnet", "method.protocol=official"]))
    assert not resolve(config.compose(["method=packnet"]))  # the honest default: the dataset's statistics
    assert not resolve(config.compose(["method=er", "scenario=class", "method.protocol=official"]))
    assert not resolve(config.compose(["method=packnet", "method.protocol=official", "data.normalization=global"]))
    assert resolve(config.compose(["method=packnet", "data.normalization=per_task"]))
    with pytest.raises(UserError, match="scenario=task"):
        config.validate(config.compose(["method=er", "scenario=class", "data.normalization=per_task"]))


def test_the_official_protocol_runs_plain_fp32():
    """No autocast, whatever precision=auto and tf32=null would pick; asking for bf16 or TF32 is refused."""
    cfg = OmegaConf.structured(config.HardwareConfig(device="cpu", precision="bf16"))
    assert hardware.setup(cfg).amp_dtype == torch.bfloat16 and hardware.setup(cfg).precision == "bf16"
    hw = hardware.setup(cfg, fp32=True)
    assert hw.amp_dtype is None and hw.precision == "fp32"
    for override in ("hardware=gpu", "hardware.precision=bf16", "hardware.tf32=true"):
        with pytest.raises(UserError, match="plain fp32"):
            config.validate(config.compose(["method=finetune", "method.protocol=official", override]))
    config.validate(config.compose(["method=finetune", "method.protocol=official", "hardware.tf32=false"]))
    _, method, ctx = train_module.build(config.compose(["method=cpg", "method.protocol=official", "logger=none",
                                                       "hardware.precision=auto"]), Recorders([]))
    assert ctx.amp_dtype is None and ctx.precision == "fp32" and method.info.view.per_task


@pytest.mark.skipif(not torch.cuda.is_available(), reason="TF32 and bf16 exist on a GPU only")
def test_on_a_gpu_the_official_protocol_turns_tf32_off():
    on = hardware.setup(OmegaConf.structured(config.HardwareConfig(device="cuda")))
    assert on.precision == "bf16" and torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    off = hardware.setup(OmegaConf.structured(config.HardwareConfig(device="cuda")), fp32=True)
    assert off.amp_dtype is None and off.precision == "fp32"
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


# method.protocol is every method's option (MethodConfig): the scenario and the record read it, no method's step.
# PackNet and finetune stand for CPG's baselines; independent, finetune's path again, runs no more (issue 74).
@pytest.mark.slow  # whole runs
@pytest.mark.parametrize("name", ["packnet", "finetune"])
def test_cpgs_baselines_run_under_the_official_protocol_and_say_so(tmp_path, name):
    """Every published row of ivclab/CPG's table gets a like-for-like row: its baselines run officially too, and
    metrics.json names the protocol, the arithmetic and the normalisation."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    train_module.run(config.compose([*quick_args(name, "task"), "method.protocol=official"]), run_dir)
    m = json.loads((run_dir / "metrics.json").read_text())
    assert (m["protocol"], m["precision"], m["normalization"]) == ("official", "fp32", "per_task")
    assert m["val_acc"] == m["acc"]  # the official code selects on (and so scores on) the test split


def test_weight_decay_on_weights_is_the_references_decay_by_hand():
    """ivclab/CPG (packnet_cifar100_main_normal.py:226-230) adds wd·w to the gradients of the conv and linear weights
    only, then takes a plain SGD step; method.weight_decay_on=weights gives that step, all (torch's) decays the batch
    norms and biases too."""
    from cl_bench.methods.loop import weights_decayed
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 6 * 6, 5))
    x, wd, lr = torch.randn(8, 3, 8, 8), 0.1, 0.5
    start = [p.detach().clone() for p in net.parameters()]

    def step(optimizer):
        with torch.no_grad():
            for p, p0 in zip(net.parameters(), start):
                p.copy_(p0)
        optimizer.zero_grad()
        net(x).square().mean().backward()
        grads = [p.grad.clone() for p in net.parameters()]
        optimizer.step()
        return grads, [p.detach().clone() for p in net.parameters()]

    grads, ours = step(torch.optim.SGD(weights_decayed(net.parameters(), wd), lr=lr, weight_decay=0.0))
    by_hand = [p0 - lr * (g + wd * p0 * (p0.dim() > 1)) for p0, g in zip(start, grads)]
    for mine, ref in zip(ours, by_hand):
        torch.testing.assert_close(mine, ref)
    _, everything = step(torch.optim.SGD(net.parameters(), lr=lr, weight_decay=wd))
    bn_weight = 2  # conv weight, conv bias, bn weight: torch's decay moves it, the reference's does not
    assert not torch.allclose(everything[bn_weight], ours[bn_weight])
    assert config.validate(config.compose(["method=finetune", "method.weight_decay=0.1",
                                           "method.weight_decay_on=weights"])).method.weight_decay_on == "weights"
    with pytest.raises(UserError, match="weight_decay_on"):
        config.validate(config.compose(["method=packnet", "method.weight_decay_on=all"]))
