"""Datasets: their sources (sources/), scenarios over them (scenarios.py), where their images live (residency.py).

The names the config offers for them (dataset.source, data.residency) and data.eval_batch_size's default live here,
in a module that imports nothing: config.py reads them, and so the config and its errors load without torch
(cli.py answers a config typo, `--help`, `list` and shell completion before torch is imported).
"""
from ..checks import Choice


class SourceName(Choice):
    """The datasets whose canonical files a source reads (dataset.source); their readers are in sources/."""

    digits = "digits"  # scikit-learn's bundled 8×8 digits
    mnist = "mnist"
    fashion_mnist = "fashion_mnist"
    cifar10 = "cifar10"
    cifar100 = "cifar100"
    svhn = "svhn"
    miniimagenet = "miniimagenet"  # the 100 classes of miniImageNet's cache pickles, 84×84
    core50 = "core50"  # CORe50's 50 objects, 128×128
    tensors = "tensors"  # your own arrays: an .npz or .safetensors file at dataset.path
    image_folder = "image_folder"  # your own images: dataset.path/{train,test}/<class>/<image>
    tinyimagenet = "tinyimagenet"  # Tiny ImageNet's 200 classes at 64×64, as `cl-bench data prepare` writes it
    imagenet_subset = "imagenet_subset"  # a class list over ImageNet, resized by `cl-bench data prepare`


class Residency(Choice):
    """Where a run keeps its images (data.residency): see residency.py."""

    auto = "auto"  # device if the images take at most half its free memory, else host, else stream
    device = "device"
    host = "host"
    stream = "stream"


# Samples per forward pass wherever a model is only evaluated (scoring, relevance, features): data.eval_batch_size.
# On a CPU the best size depends on the network: CIFAR-sized convnets scored 1.4-2.5x faster at 100 than at 1,000
# (their activations fall out of the caches), the digits' convnet and MNIST's MLP 1.6-2.6x slower (per-batch
# overhead); `python scripts/bench.py evalbatch`, docs/benchmarks.md "Evaluation batch size".
EVAL_BATCH = 1000
