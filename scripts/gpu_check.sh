#!/usr/bin/env bash
# The GPU run, prepared: on one recent GPU in under 8 minutes, from the CIFAR-10 files you have,
#   1. writes the canonical cifar-10-batches-py/ (cl-bench data prepare cifar10),
#   2. runs every method on split_cifar10 with resnet18_reduced for a few hundred steps, bf16 and channels_last
#      (hardware=gpu), and finetune and cpg once more with hardware.compile=true,
#   3. checks each run is complete, finite and above chance, and writes samples/s and peak memory per method,
#      with the GPU's name, into docs/benchmarks.md (section "GPU check"); exits non-zero naming any run that
#      failed or is not sane, after writing the table.
#
#   bash scripts/gpu_check.sh SRC [--cpu] [--docs DIR]
#     SRC     cifar-10-python.tar.gz (or the folder holding it), an image folder, or an .npz of encoded images
#     --cpu   the same path on the CPU at tiny sizes (no compile rows): the tests run it so that it cannot rot
#     --docs  where benchmarks.json/.md are written (default: the repository's docs/)
#
# Python: $PYTHON, else the repository's .venv, else python3 (with the repository on PYTHONPATH, so an
# environment that has torch, hydra and the other dependencies but not cl-bench itself works too).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 1 ] || { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }
src="$1"; shift
[ -e "$src" ] || { echo "gpu_check: $src does not exist: pass the CIFAR-10 files you have" >&2; exit 2; }
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$repo/.venv/bin/python" ]; then PYTHON="$repo/.venv/bin/python"; else PYTHON=python3; fi
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
"$PYTHON" -m cl_bench data prepare cifar10 --from "$src" --root "$work/data"
"$PYTHON" "$repo/scripts/bench.py" gpu --cifar-root "$work/data" "$@"
echo "gpu_check: done in $((SECONDS - start)) s"
