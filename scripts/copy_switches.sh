#!/usr/bin/env bash
# Issue 35: each copy-head switch of the tools recipe turned off, one arm per switch, against the recipe
# itself (the `default` arm), seeds 0,1,2, each $EXP (default +exp=tools_generated: 60 steps; the chosen
# checkpoint scored on all 10 held-out tasks x 16 and on the 50 `shapes` tasks x 8). Then
# `bugfix-rl report reference=default` and the selection rule written in docs/TOOLS.md ("Which copy
# switches stay") before any run of this sweep, applied by the Python block below.
#   bash scripts/copy_switches.sh      (6 arms x 3 seeds = 18 runs; each arm but default builds its own
#                                       tools RL base first: the switches are part of the architecture)
#   ARMS=copy_softcap_off SEEDS=0 bash scripts/copy_switches.sh     (a subset; the verdict needs 3 seeds)
# Costs on a 2-core Xeon at threads=1: a base ~6.5 min, a run ~9 min, so ~3.2 core-hours in all.
# The verdict is printed and written to <run dir>/verdict.md; nothing in docs/ or conf/ is changed.
# It ran on 2026-12-03 at commit 9becae6, when +exp=tools_generated still had every switch on (the table and
# verdict: docs/TOOLS.md). The preset has them off since, so against it the arms change nothing: run the
# script at 9becae6 to reproduce the table, or with EXP=tools to ablate the book-task recipe.
set -euo pipefail
cd "$(dirname "$0")/.."
test -x .venv/bin/bugfix-rl || make --silent .venv/.installed
BIN=.venv/bin
SEEDS=${SEEDS:-0,1,2}
EXP=${EXP:-tools_generated}
ARMS=${ARMS:-copy_softcap_off,copy_suffix_match_off,copy_edit_resume_off,copy_resume_cut_off,copy_resume_next_off}
EXTRA=${EXTRA:-}
root=${ROOT:-outputs/copy_switches/$(date +%Y-%m-%d_%H-%M-%S)}
mkdir -p "$root"

start=$(date +%s)
# shellcheck disable=SC2086  # EXTRA is a list of overrides
$BIN/bugfix-rl train +exp="$EXP" +ablation="default,$ARMS" seed="$SEEDS" $EXTRA hydra.sweep.dir="$root" -m
echo "$(( $(date +%s) - start ))" > "$root/seconds.txt"
$BIN/bugfix-rl report dir="$root" reference=default

$BIN/python - "$root" <<'EOF'
"""The selection rule of docs/TOOLS.md, "Which copy switches stay" (written before the sweep)."""
import sys
from pathlib import Path

from bugfix_rl.evaluate.ablation import build_report

root = Path(sys.argv[1])
report = build_report(root, "default")
if report.shapes is None:
    sys.exit("the rule reads the shapes table; these runs did not all evaluate the shapes tasks (eval.shapes_n)")
lines = [f"# Copy-head switches on the shapes split ({root})", "",
         "| switch turned off | seeds | shapes pass@1 | off - default [95% CI] | MDE | verdict |",
         "|---|---|---|---|---|---|"]
for row in report.shapes:
    if row.diff is None:
        lines.append(f"| (none: the recipe) | {', '.join(map(str, row.seeds))} | {row.mean:.3f} | | | |")
        continue
    diff, lo, hi = row.diff
    if not row.seed_aware or len(row.seeds) < 3:
        verdict = "no verdict (fewer than 3 seeds)"
    else:
        verdict = "stays (turning it off loses)" if hi < 0 else "goes (no loss detected without it)"
    mde = "-" if row.mde is None else f"{row.mde:.3f}"
    lines.append(f"| {row.arm.removesuffix('_off')} | {', '.join(map(str, row.seeds))} | {row.mean:.3f}"
                 f" | {diff:+.3f} [{lo:+.3f}, {hi:+.3f}] | {mde} | {verdict} |")
(root / "verdict.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo "sweep done: $root (report: $root/report.md, verdict: $root/verdict.md)"
