#!/usr/bin/env bash
# The GPU run, prepared: on one GPU, from the CIFAR-10 files you have (how long it takes on a GPU is not measured
# yet: its sizes were chosen for minutes; the --cpu rehearsal below took 50 s on 2 shared CPU cores),
#   1. writes the canonical cifar-10-batches-py/ (cl-bench data prepare cifar10),
#   2. runs every method on split_cifar10 with resnet18_reduced for a few hundred steps, bf16 and channels_last
#      (hardware=gpu), and finetune and cpg once more with hardware.compile=true,
#   3. checks each run is complete, finite and above chance, and writes samples/s and peak memory per method,
#      with the GPU's name, into docs/benchmarks.md (section "GPU check"); exits non-zero naming any run that
#      failed or is not sane, after writing the table.
#
#   bash scripts/gpu_check.sh SRC [--cpu] [--docs DIR]
#     SRC     cifar-10-python.tar.gz (or the folder holding it), an image folder, or an .npz of encoded images
#     --cpu   the same path on the CPU at tiny sizes (no compile rows): the tests run it so that it cannot rot;
#             without it, a machine where CUDA is not usable is refused at once, in one line, nothing written
#     --docs  where benchmarks.json/.md are written (default: the repository's docs/)
#
# Python: $PYTHON, else the repository's .venv, else python3 (with the repository on PYTHONPATH, so an
# environment that has torch, hydra and the other dependencies but not cl-bench itself works too).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 1 ] || { sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }
src="$1"; shift
[ -e "$src" ] || { echo "gpu_check: $src does not exist: pass the CIFAR-10 files you have" >&2; exit 2; }
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$repo/.venv/bin/python" ]; then PYTHON="$repo/.venv/bin/python"; else PYTHON=python3; fi
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Without a usable CUDA GPU the check would prepare the data and then skip every run, exiting 0 as if it had passed.
probe='import sys
try:
    import torch
    if not torch.cuda.is_available():
        sys.exit(f"torch {torch.__version__}: torch.cuda.is_available() is False")
    torch.ones(1, device="cuda").add_(1).cpu()  # a driver or device that is visible but does not work
except Exception as error:
    sys.exit((f"{type(error).__name__}: {error}".splitlines() or [""])[0])'
if [[ " $* " != *" --cpu "* ]] && ! why="$("$PYTHON" -c "$probe" 2>&1 >/dev/null | tail -n 1)"; then
  echo "gpu_check: CUDA is not usable here ($why, in $PYTHON): run it on a GPU machine, or add --cpu for the rehearsal on the CPU" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
"$PYTHON" -m cl_bench data prepare cifar10 --from "$src" --root "$work/data"
"$PYTHON" "$repo/scripts/bench.py" gpu --cifar-root "$work/data" "$@"
echo "gpu_check: done in $((SECONDS - start)) s"
