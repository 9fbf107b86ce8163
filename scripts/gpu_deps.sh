#!/usr/bin/env bash
# What the GPU check needs beyond torch and numpy, copied from a Python that has it into .gpu-deps/ (git-ignored),
# for a GPU machine with no package registry: the device tool carries it with the working tree (carry .gpu-deps,
# at most 64 MiB), and scripts/gpu_check.sh puts it on PYTHONPATH. Pure-Python packages, and safetensors' abi3
# extension; PyYAML's C extension is left out (yaml falls back to its pure-Python loader). The digits section's
# scikit-learn and scipy (over 150 MiB) are not carried: a machine without them runs --sections A and B's others.
#
#   bash scripts/gpu_deps.sh [PYTHON]    (default: the repository's .venv, else python3)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${1:-}"
[ -n "$python" ] || { [ -x "$repo/.venv/bin/python" ] && python="$repo/.venv/bin/python"; } || python=python3
packages="hydra omegaconf antlr4 yaml safetensors rich markdown_it mdurl pygments packaging"
out="$repo/.gpu-deps"
rm -rf "$out"
mkdir -p "$out"
for package in $packages; do
  dir="$("$python" -c "import importlib.util, os, sys; s = importlib.util.find_spec(sys.argv[1]); print(os.path.dirname(s.origin))" "$package" 2>/dev/null)" \
    || { echo "gpu_deps: $python has no $package" >&2; exit 1; }
  cp -r "$dir" "$out/$package"
done
rm -f "$out"/yaml/_yaml*.so
find "$out" -name __pycache__ -prune -exec rm -rf {} +
mib=$(du -sm "$out" | cut -f1)
if [ "$mib" -gt 64 ]; then
  echo "gpu_deps: $out is $mib MiB, over the 64 MiB the device tool carries" >&2
  exit 1
fi
echo "gpu_deps: $out, $mib MiB: carry it with the working tree (.gpu-deps)" >&2
