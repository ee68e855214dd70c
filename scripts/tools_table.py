"""The tools capstone across seeds: test pass@1 (base vs chosen, paired), and the book's tool table.

    python scripts/tools_table.py outputs/multirun/tools/<time>

Reads every `*/eval.json` under the directory (one run per seed of `bugfix-rl train +exp=tools
seed=0,1,2 -m`) and prints markdown: one row per seed with the test pass@1 of the start (base) and the
chosen checkpoint and their paired difference, then the held-out tool table (start vs after RL)
averaged over seeds, with the book's Qwen3-0.6B figures beside it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bugfix_rl.present.report_run import TOOL_TABLE_ROWS, tool_value

# The book's Qwen3-0.6B tools lab (its real-model labs page; README, "The book"): held-out 10 tasks x 8,
# before -> after 18 GRPO steps
BOOK = {"pass@1": ("0.100 [0.025, 0.212]", "0.488 [0.237, 0.750]"), "failed": ("0.85", "0.21"),
        "malformed": ("0.09", "0"), "calls_Bash": ("0.07", "0")}


def _rate(summary: dict) -> str:
    return f"{summary['pass_at_1']:.3f} [{summary['ci'][0]:.3f}, {summary['ci'][1]:.3f}]"


def main(root: str) -> None:
    runs = sorted(Path(root).glob("*/eval.json"))
    if not runs:
        sys.exit(f"no */eval.json under {root}")
    results = [json.loads(path.read_text()) for path in runs]
    print("| seed | start pass@1 (test) | chosen step | chosen pass@1 (test) | paired chosen - start [95% CI] |")
    print("|---|---|---|---|---|")
    for result in results:
        test, diff = result["test"], result["test"]["paired_diff"]
        print(f"| {result['config']['seed']} | {_rate(test['base'])} | {result['chosen_step']} | {_rate(test['chosen'])} |"
              f" {diff['diff']:+.3f} [{diff['ci'][0]:+.3f}, {diff['ci'][1]:+.3f}] |")
    base = sum(r["test"]["base"]["pass_at_1"] for r in results) / len(results)
    chosen = sum(r["test"]["chosen"]["pass_at_1"] for r in results) / len(results)
    n_tasks, n = len(results[0]["test"]["base"]["per_task"]), results[0]["test"]["base"]["n"]
    print(f"\nMean over {len(results)} seeds ({n_tasks} test tasks x {n} episodes each): start {base:.3f},"
          f" chosen {chosen:.3f}.\n")
    held = [r for r in results if "behaviour" in r.get("heldout", {})]
    if not held:
        return
    n_tasks, n = len(held[0]["heldout"]["per_task"]), held[0]["heldout"]["n"]
    print(f"| held-out, per episode ({n_tasks} tasks x {n}, mean of {len(held)} seeds) | start | after RL |"
          f" book start (Qwen3-0.6B) | book after |")
    print("|---|---|---|---|---|")
    start = [r["heldout_base"] for r in held]
    after = [r["heldout"] for r in held]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    print(f"| pass@1 (per seed) | {', '.join(_rate(s) for s in start)} | {', '.join(_rate(s) for s in after)} |"
          f" {BOOK['pass@1'][0]} | {BOOK['pass@1'][1]} |")
    for label, key in TOOL_TABLE_ROWS:
        before_value = mean([tool_value(s["behaviour"], key) for s in start])
        after_value = mean([tool_value(s["behaviour"], key) for s in after])
        book = BOOK.get(key, ("", ""))
        print(f"| {label} | {before_value:.2f} | {after_value:.2f} | {book[0]} | {book[1]} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
