"""Paper settings (conf/setting/, cl_bench/settings.py): `method=X dataset=Y` composes the paper's setting by itself,
each setting equals its source (the Makefile lines and presets that spelled it out until they moved here, kept below
as the overrides they were), command-line overrides win, and runs say which setting they used."""
import json
import re
from pathlib import Path

import pytest
from conftest import cl_bench, train
from omegaconf import OmegaConf
from test_cli import default_run_of

from cl_bench import config, methods, settings
from cl_bench.errors import UserError

# The Makefile's and presets' spelling of each setting before it moved to conf/setting/ (commit a29db2c), with what
# reading the references found since: gated's baselines on its schedule and batch (lit-leo/cgate config/cfg.py),
# CPG's weight decay on conv and linear weights only (ivclab/CPG packnet_cifar100_main_normal.py:226-230).
# The DER paper's MNIST rows run Mammoth's MLP, Xavier-initialised (found by docs/parity.md's runs).
SMNIST = ("dataset=split_mnist dataset.normalize=false scenario=class backbone=mlp backbone.hidden_sizes=[100,100] "
          "backbone.init=xavier_uniform "
          "method.epochs=1 method.batch_size=10 method.momentum=0")
PMNIST = ("dataset=permuted_mnist dataset.normalize=false dataset.num_tasks=20 dataset.samples_per_task=null "
          "scenario=class backbone=mlp backbone.hidden_sizes=[100,100] backbone.init=xavier_uniform method.epochs=1 "
          "method.batch_size=128 "
          "method.momentum=0")
CPG_WEIGHTS = "method.epochs=100 method.batch_size=32 method.nesterov=true method.weight_decay=4e-5 " \
              "method.weight_decay_on=weights method.lr_milestones=[50,80]"  # the decay as ivclab/CPG adds it
ABATI = {"split_mnist": "dataset=split_mnist backbone=convnet backbone.channels=[100,100,100] method.epochs=10 "
                        "method.optimizer=adam method.lr=0.001",
         **{d: f"dataset={d} backbone=resnet18 method.epochs=30 method.optimizer=adam method.lr=0.001 "
               "method.lr_milestones=[20]" for d in ("split_svhn", "split_cifar10")}}  # gated's own milestone
ICARL_ABATI = "method.batch_size=64 method.lr_gamma=0.1 method.weight_decay=0"  # gated's batch, no decay
ICARL_ABATI_FLAT = "method.batch_size=64 method.weight_decay=0"  # the same without milestones: no lr_gamma to read
# gated's class-scenario claim at a CPU's size (make repro-gated-cpu): conv net [32, 64, 64], memory 500, every image of
# Split MNIST for 2 epochs, Split CIFAR-10 cut to 2,000 images a task for 3; A-GEM on its own online protocol
CPU = {"split_mnist": "dataset=split_mnist backbone=convnet scenario=class",
       "split_cifar10": "dataset=split_cifar10 backbone=convnet scenario=class dataset.samples_per_task=2000"}
CPU_ADAM = {"split_mnist": "method.epochs=2 method.optimizer=adam method.lr=0.001",
            "split_cifar10": "method.epochs=3 method.optimizer=adam method.lr=0.001"}
# gated's Split MNIST setting also fits the offline bound of its task prediction (REPRODUCING.md's diagnostic)
OFFLINE = {"split_mnist": "method.offline_bound_epochs=10 ", "split_cifar10": ""}
ABATI_CPU = {f"method={m} dataset={d} setting=abati_cpu_{m}_{d}":
             f"{CPU[d]} method={m} {extra if m != 'gated' else OFFLINE[d]}{CPU_ADAM[d] if adam else ''}"
             for d in CPU for m, adam, extra in (("gated", True, ""), ("er", True, "method.memory_size=500 "),
                                                 ("icarl", True, f"method.memory_size=500 {ICARL_ABATI_FLAT} "
                                                                 "method.lr_milestones=[] "),
                                                 ("agem", False, "method.memory_size=500"))}
GEM_MLP = "scenario=class backbone=mlp backbone.hidden_sizes=[100,100] backbone.init=kaiming_normal"
ROT = f"dataset=rotated_mnist dataset.num_tasks=20 dataset.normalize=false {GEM_MLP}"
PERM = f"dataset=permuted_mnist dataset.num_tasks=20 dataset.normalize=false {GEM_MLP}"
MANY = ("dataset=permuted_mnist dataset.name=permuted_mnist_many dataset.num_tasks=100 dataset.samples_per_task=200 "
        f"dataset.normalize=false {GEM_MLP}")
# (many permutations were gem_permuted_mnist_many over dataset=permuted_mnist: a dataset of their own now)
LA_ER = ("method=er method.epochs=1 method.batch_size=10 method.optimizer=sgd method.momentum=0 method.lr=0.1 "
         "method.replay_batch_size=10 method.grad_clip_norm=2.0 method.replay_in_first_task=true "
         "method.replay_draw=replacement")
LA_AGEM = "method=agem method.memory_policy=ring method.reference=per_task method.grad_clip_norm=2.0"
LA_FT = "method=finetune method.epochs=1 method.batch_size=10 method.optimizer=sgd method.momentum=0 method.lr=0.1"
CMAML = "method=lamaml method.learn_lr=false method.sync_update=true"
SYNC = "method=lamaml method.sync_update=true"
GEM_CIFAR = "dataset=split_cifar100 dataset.num_tasks=20 dataset.augment=false backbone=resnet18_reduced"
LA_CIFAR = ("dataset=split_cifar100 dataset.num_tasks=20 backbone=pc_cnn dataset.augment=true "
            "dataset.brightness_jitter=0.247")
META = "method.second_order=true method.trajectory_chunks=5 method.inner_relu=false method.memory_size=200"
LAMAML_CIFAR = (f"method=lamaml {META} method.inner_clip=1.0 method.grad_clip_norm=1.0 method.outer_lr=0.25 "
                "method.alpha_init=0.1")
CMAML_CIFAR = f"{CMAML} {META} method.inner_clip=2.0 method.alpha_init=0.075 method.weight_lr=0.075"
SYNC_CIFAR = f"{SYNC} {META} method.inner_clip=2.0 method.outer_lr=0.35 method.alpha_init=0.1 method.weight_lr=0.1"
LA_CIFAR_ER = ("method=er method.batch_size=10 method.optimizer=sgd method.momentum=0 method.lr=0.03 "
               "method.memory_size=200 method.replay_batch_size=1 method.grad_clip_norm=2.0 "
               "method.replay_in_first_task=true method.replay_draw=replacement")
LA_CIFAR_AGEM = f"{LA_AGEM} method.lr=0.03 method.memory_size=200"
MULTI = "method.epochs=10 method.inner_steps=1"


def der_rows(dataset: str, old: str, rows: dict) -> dict:
    """Mammoth's best arguments per buffer, as the Makefile's repro-baselines spelt each one."""
    return {f"method={m} dataset={dataset} method.memory_size={size}":
            f"{old} method={m} method.memory_size={size} {extra}" for (m, size), extra in rows.items()}


SOURCES = {  # what `cl-bench train NEW` composes now: OLD, as it was spelt
    "method=cpg dataset=cifar100_20": "method=cpg dataset=cifar100_20 backbone=vgg16_bn",
    "method=cpg dataset=cifar100_20 setting=pae_cifar100_20":
        "method=cpg dataset=cifar100_20 backbone=vgg16_bn method.picking=false method.goal_source=finetune "
        "method.goal_repeats=5 method.max_multiplier=2.0",
    "method=packnet dataset=cifar100_20": "method=packnet dataset=cifar100_20 backbone=vgg16_bn",
    "method=finetune dataset=cifar100_20": f"method=finetune dataset=cifar100_20 backbone=vgg16_bn {CPG_WEIGHTS}",
    "method=independent dataset=cifar100_20": f"method=independent dataset=cifar100_20 backbone=vgg16_bn {CPG_WEIGHTS}",
    "method=gated dataset=split_cifar10": "method=gated dataset=split_cifar10 backbone=resnet18 method.epochs=30 "
                                          "method.lr_milestones=[20]",
    "method=gated dataset=split_svhn scenario=class": "method=gated dataset=split_svhn backbone=resnet18 "
                                                     "method.epochs=30 method.lr_milestones=[20] scenario=class",
    "method=gated dataset=split_mnist": "method=gated dataset=split_mnist backbone=convnet "
                                        "backbone.channels=[100,100,100] method.epochs=10",
    "method=der dataset=split_cifar10": "method=der dataset=split_cifar10 backbone=resnet18 scenario=class "
                                        "method.epochs=50",
    "method=derpp dataset=split_cifar10": "method=derpp dataset=split_cifar10 backbone=resnet18 scenario=class "
                                          "method.epochs=50",
    "method=derpp dataset=split_cifar10 method.memory_size=200":  # Mammoth's best_args.py, seq-cifar10, buffer 200
        "method=derpp dataset=split_cifar10 backbone=resnet18 scenario=class method.epochs=50 method.memory_size=200 "
        "method.alpha=0.1 method.beta=0.5",
    **{f"method=ewc dataset={d}": f"{ABATI[d]} method=ewc method.online=true" for d in ABATI},
    **{f"method=lwf dataset={d}": f"{ABATI[d]} method=lwf" for d in ABATI},
    "method=hat dataset=split_mnist": f"{ABATI['split_mnist']} method=hat method.batch_norm=per_task "
                                      "method.lr_schedule=milestones",  # gated's epochs, not HAT's plateau stop
    **{f"method=joint dataset={d} scenario=class": f"{ABATI[d]} method=joint scenario=class"
       for d in ("split_svhn", "split_cifar10")},
    "method=joint dataset=split_mnist setting=abati_joint_split_mnist": f"{ABATI['split_mnist']} method=joint",
    **{f"method=er dataset={d}": f"{ABATI[d]} method=er method.memory_size=500 scenario=class"
       for d in ("split_svhn", "split_cifar10")},
    **{f"method=icarl dataset={d}": f"{ABATI[d]} method=icarl method.memory_size=500 scenario=class {ICARL_ABATI}"
       for d in ("split_svhn", "split_cifar10")},
    "method=er dataset=split_mnist setting=abati_er_split_mnist":
        f"{ABATI['split_mnist']} method=er method.memory_size=500 scenario=class",
    "method=icarl dataset=split_mnist setting=abati_icarl_split_mnist":
        f"{ABATI['split_mnist']} method=icarl method.memory_size=500 scenario=class {ICARL_ABATI_FLAT} "
        "method.lr_milestones=[]",
    "method=agem dataset=split_mnist setting=abati_agem_split_mnist":
        "dataset=split_mnist backbone=convnet backbone.channels=[100,100,100] method=agem method.memory_size=500 "
        "scenario=class",
    **{f"method=agem dataset={d}": f"dataset={d} backbone=resnet18 method=agem method.memory_size=500 scenario=class"
       for d in ("split_svhn", "split_cifar10")},
    **ABATI_CPU,
    "method=finetune dataset=split_mnist": f"{SMNIST} method=finetune method.lr=0.03",
    "method=joint dataset=split_mnist": f"{SMNIST} method=joint method.lr=0.03",
    **der_rows("split_mnist", SMNIST, {
        ("er", 200): "method.lr=0.01 method.replay_batch_size=10 method.replay_in_first_task=true",
        ("er", 500): "method.lr=0.1 method.replay_batch_size=10 method.replay_in_first_task=true",
        ("agem", 200): "method.lr=0.1 method.replay_batch_size=128",
        ("agem", 500): "method.lr=0.1 method.replay_batch_size=128",
        ("der", 200): "method.lr=0.03 method.replay_batch_size=10 method.alpha=0.2",
        ("der", 500): "method.lr=0.03 method.replay_batch_size=128 method.alpha=1.0",
        ("derpp", 200): "method.lr=0.03 method.replay_batch_size=128 method.alpha=0.2 method.beta=1.0",
        ("derpp", 500): "method.lr=0.03 method.replay_batch_size=10 method.alpha=1.0 method.beta=0.5",
        ("icarl", 200): "method.lr=0.1 method.weight_decay=0 method.lr_milestones=[]",
        ("er_ace", 500): "",
        ("gdumb", 200): "method.epochs=128 method.batch_size=16 method.momentum=0.9 method.regularization=none",
        ("bic", 500): "method.momentum=0.9",
        ("lucir", 200): "method.momentum=0.9"}),
    "method=finetune dataset=permuted_mnist": f"{PMNIST} method=finetune method.lr=0.2",
    "method=joint dataset=permuted_mnist": f"{PMNIST} method=joint method.lr=0.2",
    **der_rows("permuted_mnist", PMNIST, {
        ("er", 200): "method.lr=0.2 method.replay_batch_size=128 method.replay_in_first_task=true",
        ("agem", 500): "method.lr=0.1 method.replay_batch_size=128",
        ("der", 500): "method.lr=0.2 method.replay_batch_size=128 method.alpha=1.0",
        ("derpp", 200): "method.lr=0.1 method.replay_batch_size=128 method.alpha=1.0 method.beta=1.0",
        ("derpp", 500): "method.lr=0.2 method.replay_batch_size=128 method.alpha=1.0 method.beta=0.5",
        ("er_ace", 200): "method.batch_size=10",
        ("gdumb", 500): "method.epochs=128 method.batch_size=16 method.momentum=0.9 method.regularization=none"}),
    "method=nccl dataset=rotated_mnist": f"{ROT} method=nccl",
    "method=lamaml dataset=rotated_mnist": f"{ROT} method=lamaml",
    "method=lamaml dataset=rotated_mnist setting=cmaml_rotated_mnist":
        f"{ROT} {CMAML} method.weight_lr=0.1 method.alpha_init=0.1",
    "method=lamaml dataset=rotated_mnist setting=sync_rotated_mnist":
        f"{ROT} {SYNC} method.outer_lr=0.1 method.weight_lr=0.3 method.alpha_init=0.15",
    "method=er dataset=rotated_mnist": f"{ROT} {LA_ER} method.memory_size=200 method.glances=5",
    "method=agem dataset=rotated_mnist": f"{ROT} {LA_AGEM} method.inner_steps=5",
    "method=finetune dataset=rotated_mnist": f"{ROT} {LA_FT}",
    "method=nccl dataset=permuted_mnist": f"{PERM} method=nccl",
    "method=lamaml dataset=permuted_mnist": f"{PERM} method=lamaml",
    "method=lamaml dataset=permuted_mnist setting=cmaml_permuted_mnist":
        f"{PERM} {CMAML} method.weight_lr=0.1 method.alpha_init=0.03",
    "method=lamaml dataset=permuted_mnist setting=sync_permuted_mnist":
        f"{PERM} {SYNC} method.outer_lr=0.1 method.weight_lr=0.1 method.alpha_init=0.15",
    "method=er dataset=permuted_mnist setting=la_er_permuted_mnist":
        f"{PERM} {LA_ER} method.memory_size=200 method.glances=5",
    "method=agem dataset=permuted_mnist setting=la_agem_permuted_mnist": f"{PERM} {LA_AGEM} method.inner_steps=5",
    "method=finetune dataset=permuted_mnist setting=la_finetune_permuted_mnist": f"{PERM} {LA_FT}",
    "method=nccl dataset=permuted_mnist_many": f"{MANY} method=nccl method.memory_size=500 method.inner_steps=10",
    "method=lamaml dataset=permuted_mnist_many": f"{MANY} method=lamaml method.memory_size=500 method.inner_steps=10 "
                                                "method.outer_lr=0.1 method.alpha_init=0.1",
    "method=lamaml dataset=permuted_mnist_many setting=cmaml_permuted_mnist_many":
        f"{MANY} {CMAML} method.memory_size=500 method.weight_lr=0.15 method.alpha_init=0.03",
    "method=lamaml dataset=permuted_mnist_many setting=sync_permuted_mnist_many":
        f"{MANY} {SYNC} method.memory_size=500 method.inner_steps=10 method.outer_lr=0.1 method.weight_lr=0.03 "
        "method.alpha_init=0.03",
    "method=er dataset=permuted_mnist_many": f"{MANY} {LA_ER} method.memory_size=500 method.glances=10",
    "method=agem dataset=permuted_mnist_many": f"{MANY} {LA_AGEM} method.memory_size=500 method.inner_steps=10",
    "method=finetune dataset=permuted_mnist_many": f"{MANY} {LA_FT}",
    "method=nccl dataset=split_cifar100": f"{GEM_CIFAR} method=nccl",
    "method=nccl dataset=split_cifar100 setting=nccl_split_cifar100_multipass": f"{GEM_CIFAR} method=nccl {MULTI}",
    "method=lamaml dataset=split_cifar100": f"{LA_CIFAR} {LAMAML_CIFAR} method.inner_steps=10",
    "method=lamaml dataset=split_cifar100 setting=cmaml_split_cifar100": f"{LA_CIFAR} {CMAML_CIFAR} "
                                                                          "method.inner_steps=2",
    "method=lamaml dataset=split_cifar100 setting=sync_split_cifar100": f"{LA_CIFAR} {SYNC_CIFAR} method.inner_steps=5",
    "method=er dataset=split_cifar100 setting=la_er_split_cifar100": f"{LA_CIFAR} {LA_CIFAR_ER} method.epochs=1 "
                                                                       "method.glances=10",
    "method=agem dataset=split_cifar100 setting=la_agem_split_cifar100": f"{LA_CIFAR} {LA_CIFAR_AGEM} "
                                                                         "method.inner_steps=2",
    "method=lamaml dataset=split_cifar100 setting=lamaml_split_cifar100_multipass":
        f"{LA_CIFAR} {LAMAML_CIFAR} {MULTI}",
    "method=lamaml dataset=split_cifar100 setting=cmaml_split_cifar100_multipass": f"{LA_CIFAR} {CMAML_CIFAR} {MULTI}",
    "method=lamaml dataset=split_cifar100 setting=sync_split_cifar100_multipass": f"{LA_CIFAR} {SYNC_CIFAR} {MULTI}",
    "method=er dataset=split_cifar100 setting=la_er_split_cifar100_multipass": f"{LA_CIFAR} {LA_CIFAR_ER} "
                                                                                 "method.epochs=10 method.glances=1",
    "method=agem dataset=split_cifar100 setting=la_agem_split_cifar100_multipass": f"{LA_CIFAR} {LA_CIFAR_AGEM} "
                                                                                   f"{MULTI}",
}


@pytest.fixture(scope="module", autouse=True)
def hydra_once():
    """One Hydra for the module's many compositions (config.compose uses it when it is there)."""
    from hydra import initialize_config_module
    config.register()
    with initialize_config_module("cl_bench.conf", version_base="1.3"):
        yield


def composed(overrides: str) -> dict:
    cfg = config.validate(config.compose(overrides.split()))
    return {k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
            for k in ("method", "dataset", "backbone", "scenario")}


@pytest.mark.parametrize("new, old", SOURCES.items(), ids=list(SOURCES))
def test_a_setting_composes_what_its_source_spelt_out(new, old):
    assert composed(new) == composed(f"{old} setting=none")


def test_every_setting_is_covered_by_a_source():
    """Each packaged setting, or a setting that includes it, is composed against its source above."""
    datasets = [p.stem for p in (config.CONF / "dataset").glob("*.yaml")]
    used = set()
    for new in SOURCES:
        words = dict(w.split("=", 1) for w in new.split())
        used.add(words.get("setting") or f"{words.get('method')}_{words.get('dataset')}")
    assert used <= set(settings.pairs(methods.METHODS, datasets)) | set(settings.available())
    bases = {"mammoth_split_mnist", "mammoth_permuted_mnist", "la_split_cifar100", "gem_split_cifar100",
             *(f"gem_{d}" for d in ("rotated_mnist", "permuted_mnist", "permuted_mnist_many")),
             *(f"abati_{d}" for d in ABATI), *(f"la_{m}_{d}" for m in ("er", "agem", "finetune")
                                                for d in ("rotated_mnist", "permuted_mnist_many"))}
    assert set(settings.available()) - used - bases == set()


def test_a_pair_picks_its_setting_by_itself_and_the_command_line_wins():
    config.register()
    cfg = config.compose(["method=cpg", "dataset=cifar100_20"])
    assert (cfg.setting, cfg.backbone.name, cfg.method.epochs) == ("cpg_cifar100_20", "vgg16_bn", 100)
    cfg = config.compose(["method=lamaml", "dataset=split_cifar100", "backbone=resnet18_reduced",
                          "method.outer_lr=0.5", "dataset.num_tasks=10"])
    assert (cfg.backbone.name, cfg.method.outer_lr, cfg.dataset.num_tasks) == ("resnet18_reduced", 0.5, 10)
    assert cfg.method.second_order is True  # the rest of the setting stays
    cfg = config.compose(["method=cpg", "dataset=cifar100_20", "setting=none"])
    assert cfg.setting is None and cfg.backbone.name == "vgg16_bn"  # the dataset's paper backbone stays
    cfg = config.compose(["method=gated", "dataset=split_mnist", "setting=none"])
    assert (cfg.backbone.name, list(cfg.backbone.hidden_sizes)) == ("mlp", [100, 100])  # not gated's conv net


@pytest.mark.parametrize("dataset, backbone", [("cifar100_20", "vgg16_bn"), ("split_cifar10", "resnet18"),
                                               ("split_svhn", "resnet18"), ("split_mnist", "mlp"),
                                               ("permuted_mnist", "mlp"), ("split_cifar100", "resnet18_reduced"),
                                               ("split_digits", "convnet")])
def test_each_dataset_defaults_to_its_papers_backbone(dataset, backbone):
    config.register()
    cfg = config.compose(["method=si", f"dataset={dataset}"])  # si: no paper setting on any of these
    assert cfg.setting is None
    assert cfg.backbone.name == backbone
    if backbone == "mlp":
        assert list(cfg.backbone.hidden_sizes) == [100, 100]  # the papers' MLP 2×100


def test_a_pair_without_a_paper_keeps_the_defaults():
    config.register()
    plain, pair = config.compose(["setting=none"]), config.compose([])
    assert plain == pair and pair.setting is None


@pytest.mark.slow
def test_a_memory_size_without_published_values_is_one_line():
    config.register()
    cfg = config.compose(["method=der", "dataset=split_mnist", "method.memory_size=5120"])
    assert (cfg.method.lr, cfg.method.alpha, cfg.method.replay_batch_size) == (0.1, 0.5, 128)
    with pytest.raises(UserError, match="der_split_mnist .*publishes method.lr for method.memory_size 200, 500, "
                                        "5120 only, not 300"):
        config.validate(config.compose(["method=der", "dataset=split_mnist", "method.memory_size=300"]))
    proc = cl_bench("train", "method=der", "dataset=split_mnist", "method.memory_size=300")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "method.memory_size=300" not in proc.stderr
    assert "publishes method.lr for method.memory_size 200, 500, 5120 only, not 300" in proc.stderr
    lr = config.compose(["method=der", "dataset=split_mnist", "method.memory_size=300", "method.lr=0.05",
                         "method.alpha=0.1", "method.replay_batch_size=32"])
    assert config.validate(lr).method.lr == 0.05  # set by hand, the table is not read


def test_every_packaged_pair_names_a_method_and_a_dataset():
    datasets = [p.stem for p in (config.CONF / "dataset").glob("*.yaml")]
    pairs = settings.pairs(methods.METHODS, datasets)
    assert {"cpg_cifar100_20", "gated_split_cifar10", "lamaml_split_cifar100", "der_split_mnist"} <= set(pairs)
    for name in pairs:  # a pair's setting records its own name
        assert OmegaConf.load(settings.SETTINGS / f"{name}.yaml").setting == name


@pytest.mark.slow
def test_a_run_records_its_setting(tmp_path, tmp_path_factory, worker_id):
    """A setting of your own (hydra.searchpath) for the embedded digits: console, metrics.json and the config."""
    (tmp_path / "conf" / "setting").mkdir(parents=True)
    (tmp_path / "conf" / "setting" / "finetune_split_digits.yaml").write_text(
        "# @package _global_\nsetting: finetune_split_digits\nmethod:\n  epochs: 1\n  lr: 0.02\n")
    run = tmp_path / "run"
    proc = cl_bench("train", f"hydra.run.dir={run}", "logger=console", "dataset.num_tasks=2",
                    f"hydra.searchpath=[file://{tmp_path / 'conf'}]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "setting: finetune_split_digits (preset)" in proc.stderr
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["setting"] == "finetune_split_digits"
    assert OmegaConf.load(run / ".hydra" / "config.yaml").method.lr == 0.02
    plain = Path(default_run_of(tmp_path_factory, worker_id)["run_dir"])  # the default run (test_cli.py): no setting
    assert json.loads((plain / "metrics.json").read_text())["setting"] is None
    assert "setting: none" in (plain / "train.log").read_text()


def test_cli_list_shows_the_paper_settings():
    proc = cl_bench("list")
    assert proc.returncode == 0
    assert "paper settings" in proc.stdout
    assert "method=cpg dataset=cifar100_20" in proc.stdout
    assert "setting=pae_cifar100_20" in proc.stdout


def flat(node: dict, prefix: str = "") -> dict:
    """A YAML file's leaf values by dotted key, its defaults list aside."""
    out = {}
    for key, value in node.items():
        if key == "defaults" and not prefix:
            continue
        out.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def setting_command(name: str) -> list[str]:
    """The overrides that compose a packaged setting: its pair, or the line its comment gives, or (a base of other
    settings) the dataset it names with finetune."""
    datasets = [p.stem for p in (config.CONF / "dataset").glob("*.yaml")]
    pair = settings.pairs(methods.METHODS, datasets).get(name)
    if pair:
        return [f"method={pair[0]}", f"dataset={pair[1]}"]
    text = (settings.SETTINGS / f"{name}.yaml").read_text()
    match = re.search(r"method=(\w+) dataset=(\w+) setting=" + name + r"\b", text)
    if match:
        return [f"method={match[1]}", f"dataset={match[2]}", f"setting={name}"]
    dataset = max((d for d in datasets if name.endswith(d)), key=len)
    return ["method=finetune", f"dataset={dataset}", f"setting={name}"]


@pytest.mark.parametrize("name", settings.available())
def test_no_setting_repeats_what_it_sits_on(name):
    """A setting holds only what differs from the method's and dataset's defaults (or from the setting it
    includes), as every YAML file of conf/ does."""
    config.register()
    raw = OmegaConf.load(settings.SETTINGS / f"{name}.yaml")
    base = next((d for d in raw.get("defaults") or [] if isinstance(d, str) and d != "_self_"), "none")  # its
    # backbone entry aside
    command = setting_command(name)
    under = config.compose([*(c for c in command if not c.startswith("setting=")), f"setting={base}"])
    own = {k: v for k, v in flat(OmegaConf.to_container(raw, resolve=False)).items()
           if k != "setting" and not (isinstance(v, str) and v.startswith("${"))}  # per-buffer tables aside
    repeated = [k for k, v in own.items() if OmegaConf.select(under, k, default="<unset>") == v]
    assert repeated == [], f"{name} repeats {repeated}"


def test_cfg_job_prints_the_paper_setting():
    proc = cl_bench("train", "method=cpg", "dataset=cifar100_20", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    for line in ("name: vgg16_bn", "epochs: 100", "prune_epochs: 20", "retrain_epochs: 30", "max_multiplier: 1.5",
                 "setting: cpg_cifar100_20"):
        assert line in proc.stdout, line


@pytest.mark.slow
def test_a_setting_with_per_buffer_values_runs(tmp_path):
    """The method builds its config apart from the run's (methods.build): the table reads the method's own buffer."""
    from test_shape import write_mnist
    write_mnist(tmp_path / "data", train=600, test=200)
    m = train(tmp_path / "run", "method=derpp", "dataset=split_mnist", "method.memory_size=200", "debug=fast",
              f"data.root={tmp_path / 'data'}", "data.cache=false")
    assert m["complete"] and m["setting"] == "derpp_split_mnist"
    log = (tmp_path / "run" / "train.log").read_text()
    assert "setting: derpp_split_mnist (paper)" in log
