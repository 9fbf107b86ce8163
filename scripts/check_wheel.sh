#!/usr/bin/env bash
# The installed package, as a user gets it: build a wheel from this tree, install it (no extras) into a fresh
# venv outside the checkout, and from another folder run the default job, a two-seed sweep with the packaged
# configs, and the one-line errors of the extras it lacks.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip wheel --no-deps --quiet -w "$work/dist" .
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet "$work"/dist/cl_bench-*.whl
mkdir "$work/elsewhere" && cd "$work/elsewhere"
cl="$work/venv/bin/cl-bench"
"$cl" train method.epochs=1 logger=none
"$cl" train -m seed=0,1 method.epochs=1 dataset.num_tasks=2 logger=none
test "$(ls outputs/runs | wc -l)" = 1 && test -f outputs/sweeps/*/1/metrics.json
expect_extra() {  # the command fails with one line naming the extra
  local extra=$1; shift
  if out=$("$cl" "$@" 2>&1); then echo "check_wheel: '$*' ran without the $extra extra"; exit 1; fi
  [ "$(printf '%s\n' "$out" | grep -c .)" = 1 ] && grep -q "cl-bench\[$extra\]" <<<"$out" \
    || { echo "check_wheel: '$*' said: $out"; exit 1; }
}
expect_extra wandb train logger=wandb
expect_extra sweep train -m hydra/sweeper=maximize_objective
# without the plots extra the report still writes its tables, and says in one line how to get the plots
out=$("$cl" report outputs/sweeps 2>&1) && test -f outputs/sweeps/report.md && grep -q "cl-bench\[plots\]" <<<"$out" \
  || { echo "check_wheel: 'report outputs/sweeps' without the plots extra said: $out"; exit 1; }
"$cl" report outputs/sweeps --no-plots > /dev/null
echo "check_wheel: the wheel installs and runs from $work/elsewhere"
