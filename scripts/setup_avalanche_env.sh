#!/usr/bin/env bash
# ONLY for the peer benchmark (scripts/avalanche_split_mnist.py): builds a separate virtual environment with
# Avalanche 0.6.0. Avalanche is never a dependency of cl-bench; do not install it into cl-bench's .venv.
#
#   scripts/setup_avalanche_env.sh [VENV]     # VENV defaults to ../avalanche-venv relative to the repo root
#
# Idempotent: reuses an existing venv, and pip skips what is already installed at these versions.
# Verified on Python 3.11: avalanche-lib 0.6.0 resolves its dependencies against torch 2.14.1 /
# torchvision 0.29.1 without conflicts (pip check clean), so no --no-deps workaround is needed.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/../avalanche-venv}"

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install torch==2.14.1 torchvision==0.29.1
"$venv/bin/pip" install avalanche-lib==0.6.0
"$venv/bin/pip" check
"$venv/bin/python" -W ignore -c "import avalanche, torch; print('avalanche', avalanche.__version__, 'torch', torch.__version__)"
