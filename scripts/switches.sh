#!/usr/bin/env bash
# The reward switches of the design review, each as an ablation arm against the default (docs/RESULTS.md
# section 6): partial credit, the mixed reward, flaky tests, a too-high step penalty, grading at
# truncation; 3 seeds each, 30 steps, 10 held-out tasks x 16 (+exp=ablation). Every run also keeps the
# leakage canary on (the default): a leak would have stopped it.
#   bash scripts/switches.sh        (18 runs, about 4 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
test -x .venv/bin/bugfix-rl || make --silent .venv/.installed
BIN=.venv/bin
root=outputs/switches/$(date +%Y-%m-%d_%H-%M-%S)
start=$(date +%s)
$BIN/bugfix-rl train +exp=ablation +ablation=default,partial,mixed,flaky,step_penalty,grade seed=0,1,2 \
  hydra.sweep.dir="$root" -m
seconds=$(( $(date +%s) - start ))
$BIN/bugfix-rl report dir="$root"
$BIN/python scripts/switches_section.py "$root" "$seconds"
