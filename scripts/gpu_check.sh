#!/usr/bin/env bash
# The GPU check: what one GPU does with cl-bench's paper settings (scripts/gpu_check.py says what it measures). On
# its first H200 (2026-12-04, docs/benchmarks.md) four of the seven settings took 500 s: a short lease runs it in
# parts (--only, --sections), each part's rows written as they come. In order:
#   1. refuses, in one line and non-zero, a machine where CUDA is not usable (before starting any Python when no
#      NVIDIA device is present at all);
#   2. uses the machine's own Python and torch and no package registry: what the check needs beyond torch and
#      numpy comes from that Python or from .gpu-deps/ (bash scripts/gpu_deps.sh builds it; it travels with the
#      working tree), else it refuses in one line naming what is missing;
#   3. on data it writes: each paper setting's steps past warm-up (time, syncs, GPU-busy fraction, peak memory)
#      beside a plain PyTorch loop on the same network and batch; two settings' steps eager and captured as CUDA
#      graphs (hardware.cuda_graphs), and the default job's weights trained captured against eager; 1, 4 and 8 jobs
#      side by side; the default job in fp32 and bf16 against the CPU;
#   4. writes gpu_check.json and gpu_check.md in the folder it names (default outputs/gpu_check/DATE-TIME) and
#      exits non-zero naming anything flagged.
#
#   bash scripts/gpu_check.sh [--out DIR] [--cpu] [--only WORDS] [--sections LIST|A|B]
#     --cpu    the rehearsal: the same path on the CPU at tiny sizes (the suite runs it)
#     --only   the settings whose labels start with these comma-separated words
#     --sections  which of settings,graphs,jobs,digits to run, in that order (default all four), or one of the
#              whole check's two calls, A then B, each within 4 minutes on one H100 (gpu_check.py CALLS)
#
# Python: $PYTHON, else the repository's .venv, else python3 (with the repository on PYTHONPATH). The torch floor is
# the oldest torch the check and the suite have run on (docs/gpu_check/README.md).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/outputs/gpu_check/$(date +%Y%m%d-%H%M%S)"
args=()
cpu=false
sections=settings,graphs,jobs,digits
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --cpu) cpu=true; args+=(--cpu); shift ;;
    --only) args+=(--only "$2"); shift 2 ;;
    --sections) args+=(--sections "$2"); sections="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
  for candidate in "$repo/.venv/bin/python" python3; do
    PYTHON="$candidate"
    if "$candidate" -c "import torch" 2>/dev/null; then break; fi
  done
fi
carried="$repo/.gpu-deps"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}${carried:+:$carried}" PYTHONUNBUFFERED=1
# The modules the check imports beyond the standard library; the digits section's split_digits and verdicts add
# scikit-learn and scipy
needs="torch numpy hydra omegaconf antlr4 yaml safetensors rich"
case "$sections" in *digits*|B) needs="$needs sklearn scipy" ;; esac
missing="$("$PYTHON" -c 'import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))' $needs 2>/dev/null)" \
  || missing="$PYTHON itself"
if [ -n "$missing" ]; then
  echo "gpu_check: missing $missing in $PYTHON: carry them in .gpu-deps/ (bash scripts/gpu_deps.sh builds it; no package registry is used)" >&2
  exit 1
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
