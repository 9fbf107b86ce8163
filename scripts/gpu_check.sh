#!/usr/bin/env bash
# The GPU check: what one GPU does with cl-bench's paper settings (scripts/gpu_check.py says what it measures). On
# its first H200 (2026-12-04, docs/benchmarks.md) four of the seven settings took 500 s: a short lease runs it in
# parts (--only, --sections), each part's rows written as they come. In order:
#   1. refuses, in one line and non-zero, a machine where CUDA is not usable (before installing anything when no
#      NVIDIA device is present at all);
#   2. installs only what it needs: nothing when the Python it finds has cl-bench's dependencies (PYTHONPATH counts:
#      a machine without a registry takes the missing ones as carried wheels), else cl-bench without extras into
#      .venv-gpu/ from PyPI (torch, a CUDA build);
#   3. on data it writes: each paper setting's steps past warm-up (time, syncs, GPU-busy fraction, peak memory)
#      beside a plain PyTorch loop on the same network and batch; two settings' steps eager and captured as CUDA
#      graphs (hardware.cuda_graphs), and the default job's weights trained captured against eager; 1, 4 and 8 jobs
#      side by side; the default job in fp32 and bf16 against the CPU;
#   4. writes gpu_check.json and gpu_check.md in the folder it names (default outputs/gpu_check/DATE-TIME) and
#      exits non-zero naming anything flagged.
#
#   bash scripts/gpu_check.sh [--out DIR] [--cpu] [--only WORDS] [--sections LIST]
#     --cpu    the rehearsal: the same path on the CPU at tiny sizes (the suite runs it)
#     --only   the settings whose labels start with these comma-separated words
#     --sections  which of settings,graphs,jobs,digits to run, in that order (default all four): a second call's rest
#
# Python: $PYTHON, else the repository's .venv or .venv-gpu, else python3 (with the repository on PYTHONPATH).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/outputs/gpu_check/$(date +%Y%m%d-%H%M%S)"
args=()
cpu=false
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --cpu) cpu=true; args+=(--cpu); shift ;;
    --only) args+=(--only "$2"); shift 2 ;;
    --sections) args+=(--sections "$2"); shift 2 ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument $1: see bash scripts/gpu_check.sh --help" >&2; exit 2 ;;
  esac
done
refuse() {
  echo "gpu_check: CUDA is not usable here ($1): run it on a GPU machine, or add --cpu for the rehearsal on the CPU" >&2
  exit 1
}
# Without any NVIDIA device (nor WSL's GPU device), refuse before starting any Python: seconds, not the minutes of
# installing torch or the seconds of importing it only to find no GPU.
if ! $cpu && [ ! -e /dev/nvidia0 ] && [ ! -e /dev/dxg ] && ! nvidia-smi -L >/dev/null 2>&1; then
  refuse "no NVIDIA device: no /dev/nvidia0, /dev/dxg or nvidia-smi"
fi
if [ -z "${PYTHON:-}" ]; then
  for candidate in "$repo/.venv/bin/python" "$repo/.venv-gpu/bin/python" python3; do
    PYTHON="$candidate"
    if "$candidate" -c "import torch, hydra" 2>/dev/null; then break; fi
  done
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
deps='import torch, torchvision, hydra, omegaconf, rich, sklearn, scipy, safetensors, yaml, PIL'
if ! "$PYTHON" -c "$deps" 2>/dev/null; then
  echo "gpu_check: installing cl-bench's dependencies into $repo/.venv-gpu" >&2
  python3 -m venv "$repo/.venv-gpu"
  "$repo/.venv-gpu/bin/pip" install --quiet "$repo"
  PYTHON="$repo/.venv-gpu/bin/python"
fi
probe='import sys
try:
    import torch
    if not torch.cuda.is_available():
        sys.exit(f"torch {torch.__version__}: torch.cuda.is_available() is False")
    torch.ones(1, device="cuda").add_(1).cpu()  # a driver or device that is visible but does not work
except Exception as error:
    sys.exit((f"{type(error).__name__}: {error}".splitlines() or [""])[0])'
if ! $cpu && ! why="$("$PYTHON" -c "$probe" 2>&1 >/dev/null | tail -n 1)"; then
  refuse "$why, in $PYTHON"
fi
exec "$PYTHON" "$repo/scripts/gpu_check.py" --out "$out" "${args[@]}"
