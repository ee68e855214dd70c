"""Rows of the README's results table from finished runs: per split, the start and the chosen
checkpoint's pass@1 averaged over seeds, each seed's value, and chosen - start with the seeds-and-tasks
interval `bugfix-rl report` uses (evaluate/ablation.compare_arms: each arm's seed-to-seed variance plus
the task-to-task variance of the paired differences).

    python scripts/results_rows.py "capstone_generated" outputs/<sweep dir> [more run or sweep dirs]

Every run given must be one recipe (its seeds); a split is printed when every run evaluated it. For a
generated split (`shapes`, `shapes_val`: tasks named '<template>-<hash>', several per template) a second
row gives the gain over templates, each template's tasks averaged into one unit: tasks of one template
move together, so for a claim about new shapes that is the interval to read (docs/STATISTICS.md, "Where
the intervals fail").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bugfix_rl.evaluate.ablation import compare_arms  # before torch: bugfix_rl pins torch's CPU kernels
from bugfix_rl.evaluate.stats import several_per_template, template_means

import torch

SPLITS = (("test", "test"), ("heldout", "held-out"), ("shapes", "shapes"), ("shapes_val", "shapes_val"))  # eval.json key, printed name


def runs_under(paths: list[str]) -> list[dict]:
    found = []
    for path in map(Path, paths):
        files = [path / "eval.json"] if (path / "eval.json").is_file() else sorted(path.glob("*/eval.json"))
        found += [json.loads(f.read_text()) for f in files]
    if not found:
        sys.exit(f"error: no eval.json under {', '.join(paths)}")
    return found


def start_and_chosen(result: dict, split: str) -> tuple[dict, dict] | None:
    if split == "test":
        return (result["test"]["base"], result["test"]["chosen"]) if "test" in result else None
    return (result[f"{split}_base"], result[split]) if split in result else None


def rows(label: str, results: list[dict]) -> list[str]:
    seeds = [r["config"]["seed"] for r in results]
    out = []
    for split, name in SPLITS:
        pairs = [start_and_chosen(r, split) for r in results]
        if any(p is None for p in pairs):
            continue
        start = torch.tensor([[c / p[0]["n"] for c in p[0]["per_task"]] for p in pairs], dtype=torch.float64)
        chosen = torch.tensor([[c / p[1]["n"] for c in p[1]["per_task"]] for p in pairs], dtype=torch.float64)
        (diff, lo, hi), _, seed_aware = compare_arms(chosen, start)
        per_seed = " / ".join(f"{float(v):.3f}" for v in chosen.mean(1))
        design = f"{start.shape[1]} x {pairs[0][1]['n']}"
        interval = "seeds + tasks" if seed_aware else "tasks"
        out.append(f"| {label} | {', '.join(map(str, seeds))} | {name} ({design}) | {float(start.mean()):.3f}"
                   f" | {float(chosen.mean()):.3f} ({per_seed}) | {diff:+.3f} [{lo:+.3f}, {hi:+.3f}] ({interval}) |")
        names = pairs[0][1].get("tasks_names") or []
        if any((p[0].get("tasks_names") or []) != names or (p[1].get("tasks_names") or []) != names for p in pairs):
            sys.exit(f"error: the runs read different {name} tasks")
        if several_per_template(names):  # generated tasks (shapes, shapes_val): over their templates too
            start_units, chosen_units = template_means(start, names), template_means(chosen, names)  # [seeds, K]
            templates = start_units.shape[-1]
            (diff, lo, hi), _, _ = compare_arms(chosen_units, start_units)
            out.append(f"| {label} | {', '.join(map(str, seeds))} | {name}, over its {templates} templates |"
                       f" {float(start_units.mean()):.3f} | {float(chosen_units.mean()):.3f} |"
                       f" {diff:+.3f} [{lo:+.3f}, {hi:+.3f}] ({interval.replace('tasks', 'templates')}) |")
    return out


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit(__doc__)
    print("| recipe | seeds | split (tasks x episodes) | start | chosen: mean (per seed) | gain [95% CI] |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows(argv[0], runs_under(argv[1:]))))


if __name__ == "__main__":
    main(sys.argv[1:])
