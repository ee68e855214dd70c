#!/usr/bin/env bash
# The preset sweep (issue 3, must-show 4): each preset x seeds 0,1,2, 30 steps, scored on all 10
# held-out tasks x 16 episodes (+exp=ablation: 2 runs at a time, 1 thread each), then `bugfix-rl report`
# (held-out pass@1 by seed, difference vs grpo with its seeds-and-tasks interval and MDE, episodes sampled
# per run: dynamic sampling's extra rollouts included). The table is written into docs/ALGORITHMS.md
# between the sweep markers and the forest plot to docs/img/sweep_presets_forest.png.
#   bash scripts/sweep_presets.sh                    (5 presets x 3 seeds = 15 runs)
#   PRESETS="grpo dapo" SEEDS=0 EXTRA="steps=2 eval.heldout_n=2" DOCS=0 bash scripts/sweep_presets.sh   (dry run)
#   EXTRA="hydra/launcher=slurm_cpu" bash scripts/sweep_presets.sh     (on a cluster)
# `arm` is a top-level key, so each preset is its own -m sweep with arm=<preset>; report groups by arm.
set -euo pipefail
cd "$(dirname "$0")/.."
test -x .venv/bin/bugfix-rl || make --silent .venv/.installed
BIN=.venv/bin
PRESETS=${PRESETS:-"grpo dr_grpo rloo dapo gspo"}
SEEDS=${SEEDS:-0,1,2}
EXTRA=${EXTRA:-}
DOCS=${DOCS:-1}
root=outputs/sweep_presets/$(date +%Y-%m-%d_%H-%M-%S)
mkdir -p "$root"

for preset in $PRESETS; do
  start=$(date +%s)
  # shellcheck disable=SC2086  # EXTRA is a list of overrides
  $BIN/bugfix-rl train +exp=ablation algo="$preset" arm="$preset" seed="$SEEDS" $EXTRA \
    hydra.sweep.dir="$root/$preset" -m
  echo "$preset $(( $(date +%s) - start ))" >> "$root/seconds.txt"
done
$BIN/bugfix-rl report dir="$root" reference=grpo

if [ "$DOCS" = 1 ]; then
  mkdir -p docs/img
  [ -f "$root/forest_plot.png" ] && cp "$root/forest_plot.png" docs/img/sweep_presets_forest.png
  $BIN/python - "$root" "$PRESETS" "$SEEDS" "$EXTRA" <<'EOF'
import re
import sys
from pathlib import Path

root, presets, seeds, extra = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
report = (root / "report.md").read_text().splitlines()
body = report[2:report.index("## Runs")]  # description, table, forest plot line, power block
body = [line.replace("](forest_plot.png)", "](img/sweep_presets_forest.png)").replace("## Power", "### Power")
        for line in body]
while body and not body[-1].strip():
    body.pop()
seconds = dict(line.split() for line in (root / "seconds.txt").read_text().splitlines())
command = "bash scripts/sweep_presets.sh" if not extra and presets == "grpo dr_grpo rloo dapo gspo" else (
    f'PRESETS="{presets}" SEEDS={seeds} EXTRA="{extra}" bash scripts/sweep_presets.sh')
block = ["<!-- sweep:begin -->", f"Regenerate: `{command}` (run dir `{root}`).", ""] + body + [
    "", f"Wall-clock per preset (seeds {seeds}, 2 runs at a time): "
    + ", ".join(f"{name} {int(s) // 60} min {int(s) % 60} s" for name, s in seconds.items()) + ".",
    "<!-- sweep:end -->"]
docs = Path("docs/ALGORITHMS.md")
text = docs.read_text()
text = re.sub(r"<!-- sweep:begin -->.*<!-- sweep:end -->", lambda _: "\n".join(block), text, flags=re.S)
docs.write_text(text)
print(f"docs/ALGORITHMS.md: sweep table from {root}")
EOF
fi
echo "sweep done: $root (report: $root/report.md)"
