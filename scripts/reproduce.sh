#!/usr/bin/env bash
# Regenerate docs/RESULTS.md from scratch: the capstone (seed 0), the 12-run ablation, the behaviour
# analysis, the power calculation and the 1-thread vs 2-thread experiment.
#   bash scripts/reproduce.sh            (about 10-15 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
make --silent .venv/.installed
BIN=.venv/bin
stamp=$(date +%Y-%m-%d_%H-%M-%S)

capstone=outputs/reproduce/$stamp/capstone
$BIN/bugfix-rl train +exp=capstone seed=0 logger.console=false hydra.run.dir=$capstone
if command -v chromium >/dev/null; then bash scripts/viewer_screenshot.sh "$capstone"; fi

ablation=outputs/reproduce/$stamp/ablation
start=$($BIN/python -c "import time; print(time.time())")
$BIN/bugfix-rl train +exp=ablation +ablation=default,kl,sft,public seed=0,1,2 hydra.sweep.dir=$ablation -m
seconds=$($BIN/python -c "import time; print(round(time.time() - $start, 1))")
$BIN/bugfix-rl report dir=$ablation

$BIN/python scripts/make_results.py --capstone $capstone --ablation $ablation --ablation-seconds "$seconds"
echo "docs/RESULTS.md regenerated (capstone: $capstone, ablation: $ablation, ablation wall-clock ${seconds}s)"
