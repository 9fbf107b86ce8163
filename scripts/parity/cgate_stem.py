"""Diagnostic for the gated parity row (docs/parity.md, cgate): is cgate's ImageNet stem at 64 pixels what lets its
later tasks learn where cl-bench's stay near chance?

cl-bench cannot build cgate's ResNet-18 (a 7x7 stride-2 stem and a max-pool, on CIFAR images upscaled to 64x64), so
this runs cgate the other way round: its copy gets, on top of the row's patches, CIFAR's stem (a 3x3 stride-1 conv,
no max-pool) and 32x32 input (UPSCALE_SIZE 32), which is the network cl-bench's row trains. Everything else is the
row's: the split of each seed, the cfg values, the seeds, the augmentation and normalisation (0.5 / 0.5). Compare
its RA with the row's two sides in docs/parity.md. Not a parity row: this changes cgate's architecture.

    .venv/bin/python scripts/parity/cgate_stem.py --ref /path/to/cgate --data-root DIR \\
        --python /path/to/venv/bin/python [--seeds 0]

Its records go to outputs/parity-diagnostics/cgate_stem/seed<k>.json.
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity import cgate, common  # noqa: E402
from parity.common import Patch  # noqa: E402

NAME = "cgate-stem"
ROW = "gated_task"
STEM = [
    Patch("src/model.py", "'kernel_size': 7,\n                                   'padding': 3,\n"
                          "                                   'stride': 2",
          "'kernel_size': 3,\n                                   'padding': 1,\n"
          "                                   'stride': 1",
          "diagnostic: CIFAR's 3x3 stride-1 stem conv instead of the ImageNet 7x7 stride 2"),
    Patch("src/model.py", "nn.Sequential(nn.MaxPool2d(kernel_size=2))", "nn.Sequential(nn.Identity())",
          "diagnostic: no max-pool after the stem, as CIFAR's ResNet-18"),
    Patch("config/cfg.py", "UPSCALE_SIZE = 64", "UPSCALE_SIZE = 32",
          "diagnostic: CIFAR's own 32x32 images, not upscaled"),
]


def main() -> None:
    parser = common.reference_arguments(cgate, "cgate with CIFAR's ResNet-18 stem at 32 pixels (a diagnostic)")
    parser.set_defaults(seeds=[0])  # about an hour a seed here
    args = parser.parse_args()
    work = args.work / NAME
    _lock = common.hold(work, NAME)
    copy = common.patched_copy(args.ref.resolve(), cgate.PINNED, [*cgate.PATCHES, *STEM], work, args.any_commit)
    out = common.ROOT / "outputs" / "parity-diagnostics" / "cgate_stem"
    out.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        outcome, seconds, command = common.reference_side(cgate, copy, ROW, seed, work, args)
        path = out / f"seed{seed}.json"
        path.write_text(json.dumps({"seed": seed, "seconds": seconds, "cfg": command, **asdict(outcome)}, indent=1))
        common.report(path, outcome, seconds)


if __name__ == "__main__":
    main()
