"""scripts/parity/lamaml.py: cl-bench's split written in La-MAML's input file reads back unchanged, and La-MAML's
results.txt parses to its final accuracy row."""
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from parity import common, lamaml  # noqa: E402

# La-MAML's results.txt of lamaml_rotations, seed 0 (reference commit cff3524), as written by its
# metrics.confusion_matrix: the accuracies before training, '|', one row per finished task, then the summary.
SAMPLE = "\n".join([
    '0.0903 0.0976 0.0810 0.0946 0.1114 0.1176 0.1067 0.1066 0.1076 0.0967 '
    '0.1124 0.1156 0.1160 0.1068 0.1109 0.1096 0.1107 0.0990 0.1014 0.0952',
    '|',
    '0.8672 0.8383 0.7575 0.5750 0.4538 0.3741 0.2492 0.2167 0.1704 0.1577 '
    '0.1386 0.1148 0.1217 0.1211 0.1290 0.1596 0.1605 0.1688 0.1619 0.1759',
    '0.8919 0.8941 0.8337 0.6600 0.5270 0.4275 0.2658 0.2144 0.1579 0.1461 '
    '0.1277 0.1152 0.1202 0.1267 0.1416 0.1724 0.1774 0.1834 0.1844 0.1997',
    '0.8925 0.9126 0.8974 0.7952 0.6695 0.5755 0.3747 0.2967 0.2209 0.1843 '
    '0.1532 0.1280 0.1303 0.1350 0.1482 0.1699 0.1739 0.1833 0.1815 0.1949',
    '0.8732 0.9063 0.9124 0.8774 0.8159 0.7378 0.5300 0.4266 0.3196 0.2331 '
    '0.1809 0.1314 0.1323 0.1338 0.1476 0.1767 0.1809 0.1880 0.1877 0.1998',
    '0.8638 0.8967 0.9115 0.8994 0.8764 0.8331 0.6879 0.5751 0.4485 0.3322 '
    '0.2360 0.1373 0.1312 0.1322 0.1381 0.1623 0.1653 0.1785 0.1787 0.1954',
    '0.8523 0.8880 0.9076 0.9053 0.8973 0.8796 0.7815 0.6888 0.5566 0.4182 '
    '0.3064 0.1576 0.1327 0.1300 0.1282 0.1472 0.1522 0.1674 0.1689 0.1843',
    '0.8292 0.8685 0.8927 0.9036 0.9032 0.9000 0.8658 0.8132 0.7272 0.5774 '
    '0.4309 0.2137 0.1633 0.1537 0.1409 0.1411 0.1424 0.1574 0.1647 0.1803',
    '0.8229 0.8610 0.8888 0.9001 0.9027 0.9062 0.8948 0.8700 0.8189 0.6981 '
    '0.5420 0.2750 0.2036 0.1882 0.1621 0.1671 0.1692 0.1782 0.1838 0.1958',
    '0.8025 0.8408 0.8684 0.8818 0.8893 0.8987 0.9052 0.8957 0.8730 0.7979 '
    '0.6835 0.3899 0.2954 0.2533 0.1886 0.1619 0.1519 0.1638 0.1721 0.1830',
    '0.7902 0.8316 0.8624 0.8748 0.8803 0.8905 0.9053 0.9058 0.8972 0.8667 '
    '0.7848 0.4947 0.3690 0.3179 0.2162 0.1729 0.1603 0.1679 0.1751 0.1786',
    '0.7786 0.8227 0.8487 0.8596 0.8655 0.8728 0.8883 0.8947 0.8978 0.8935 '
    '0.8605 0.6536 0.5342 0.4687 0.3327 0.2084 0.1705 0.1648 0.1659 0.1644',
    '0.7623 0.8051 0.8321 0.8456 0.8440 0.8445 0.8663 0.8692 0.8747 0.8853 '
    '0.8882 0.8209 0.7527 0.7045 0.5538 0.3647 0.2769 0.2209 0.2052 0.1765',
    '0.7465 0.7929 0.8189 0.8330 0.8281 0.8282 0.8417 0.8476 0.8558 0.8691 '
    '0.8850 0.8671 0.8393 0.8108 0.6924 0.4801 0.3692 0.2742 0.2383 0.1907',
    '0.7301 0.7763 0.8078 0.8232 0.8165 0.8145 0.8242 0.8271 0.8353 0.8496 '
    '0.8696 0.8783 0.8674 0.8527 0.7739 0.5759 0.4473 0.3397 0.2910 0.2152',
    '0.7118 0.7535 0.7903 0.8100 0.8046 0.7941 0.8018 0.8040 0.8127 0.8255 '
    '0.8535 0.8709 0.8776 0.8764 0.8453 0.6883 0.5689 0.4322 0.3716 0.2715',
    '0.6975 0.7376 0.7816 0.8042 0.8033 0.7934 0.7923 0.7893 0.7912 0.8060 '
    '0.8247 0.8523 0.8720 0.8779 0.8744 0.8177 0.7323 0.5944 0.5113 0.3747',
    '0.6762 0.7240 0.7732 0.7926 0.7913 0.7803 0.7758 0.7718 0.7780 0.7927 '
    '0.8094 0.8332 0.8534 0.8633 0.8744 0.8592 0.8212 0.7109 0.6333 0.4757',
    '0.6552 0.6937 0.7555 0.7747 0.7690 0.7630 0.7519 0.7490 0.7526 0.7795 '
    '0.7919 0.8075 0.8286 0.8392 0.8533 0.8647 0.8537 0.8180 0.7664 0.6307',
    '0.6141 0.6597 0.7370 0.7648 0.7676 0.7535 0.7492 0.7486 0.7557 0.7798 '
    '0.7846 0.7943 0.8130 0.8236 0.8428 0.8650 0.8649 0.8589 0.8300 0.7300',
    '0.5657 0.6228 0.7033 0.7463 0.7471 0.7362 0.7290 0.7281 0.7371 0.7647 '
    '0.7706 0.7774 0.7959 0.8010 0.8230 0.8527 0.8595 0.8728 0.8650 0.8161',
    '',
    'Diagonal Accuracy: 0.8545',
    'Final Accuracy: 0.7657',
    'Backward: -0.0888',
    'Forward:  0.6367',
]) + "\n"


def write_idx(path: Path, array: np.ndarray) -> None:
    """An uncompressed IDX file of unsigned bytes (MNIST's canonical format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes())


def write_mnist(root: Path) -> None:
    """A tiny MNIST of random 28 x 28 digits, every class present in both splits."""
    rng = np.random.default_rng(0)
    for prefix, count in (("train", 60), ("t10k", 30)):
        images = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        write_idx(root / "MNIST/raw" / f"{prefix}-images-idx3-ubyte", images)
        write_idx(root / "MNIST/raw" / f"{prefix}-labels-idx1-ubyte", (np.arange(count) % 10).astype(np.uint8))


@pytest.mark.parametrize("name", ["lamaml_rotations", "agem_permutations"])
def test_written_tasks_read_back_as_the_split(tmp_path, name):
    write_mnist(tmp_path)
    row = lamaml.ROWS[name]
    small = [*row.clbench, "dataset.num_tasks=3", "dataset.samples_per_task=8"]
    scenario = common.scenario([*small, "seed=1", f"data.root={tmp_path}", "data.cache=false"])
    lamaml.write_tasks(scenario, row, tmp_path)
    path = tmp_path / f"{lamaml.ref_dataset(row)}.pt"
    assert path.exists()
    train, test = lamaml.read_tasks(path)
    want_train = [(task.train.x, task.train.y) for task in scenario.tasks]
    want_test = [(split.x, split.y) for split in scenario.test]
    for got, want in ((train, want_train), (test, want_test)):
        assert len(got) == len(want) == 3
        for (x, y), (wx, wy) in zip(got, want):
            assert torch.equal(x, wx.flatten(1)) and torch.equal(y, wy)
    # La-MAML's layout: [train, test], each task [what made it, float pixels N x 784 in [0, 1], int64 labels]
    raw_train, _ = torch.load(path, weights_only=True)
    x = raw_train[0][1]
    assert x.dtype == torch.float32 and x.shape[1] == 784 and 0 <= x.min() and x.max() <= 1
    assert raw_train[0][2].dtype == torch.int64


def test_parses_the_final_accuracy_row():
    outcome = lamaml.parse_results(SAMPLE)
    assert len(outcome.matrix) == 20 and all(len(r) == 20 for r in outcome.matrix)
    assert outcome.matrix[0][0] == 0.8672
    assert outcome.ra == pytest.approx(0.7657, abs=5e-5)  # its own "Final Accuracy" line


def test_rows_run_the_same_benchmark_on_both_sides():
    for name, row in lamaml.ROWS.items():
        bench = name.split("_")[1]
        assert lamaml.ref_dataset(row) == f"mnist_{bench}"
        assert f"dataset={lamaml.BENCHMARKS[bench][0]}" in row.clbench
