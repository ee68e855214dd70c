#!/usr/bin/env bash
# Regenerate everything generated in docs/ from the current code (`make docs`), one job after another:
#   1. docs/RESULTS.md (capstone seed 0, the 12-run ablation, behaviour, power, threads): scripts/reproduce.sh;
#      its capstone dashboard also becomes docs/img/dashboard.png, MEASUREMENT.md's dashboard figure;
#   2. docs/ALGORITHMS.md's preset sweep table and docs/img/sweep_presets_forest.png: scripts/sweep_presets.sh;
#   3. docs/MEASUREMENT.md's report example and docs/img/forest_plot.png: scripts/measurement_demo.sh;
#   4. docs/STATISTICS.md's coverage tables and `plan` on the new ablation: scripts/statistics_doc.py;
#   5. docs/RESULTS.md's section 6, the reward switches: scripts/switches.sh.
# About 25 minutes on 2 cores. tests/test_generated_docs.py checks that the tables' columns are the ones
# the code prints now.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/reproduce.sh
.venv/bin/python scripts/statistics_doc.py
bash scripts/switches.sh
cp docs/img/capstone_dashboard.png docs/img/dashboard.png
bash scripts/sweep_presets.sh
bash scripts/measurement_demo.sh
echo "docs regenerated: git diff --stat docs/"
