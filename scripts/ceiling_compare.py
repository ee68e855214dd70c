"""Two arms of `scripts/shapes_ceiling.py` runs, seed-aware: the numbers its reading rules judge.

    .venv/bin/python scripts/ceiling_compare.py --a widen0.json widen1.json widen2.json \
        --b control0.json control1.json control2.json [--arm training] [--a-arm A] [--b-arm B] \
        [--a-step 30] [--b-step 60] [--paired] [--alpha 0.0294]

Each file is one seed's `shapes_ceiling.py --out`; --arm names the arm read in every file (--a-arm, --b-arm:
one per side, e.g. the weights' moving average against the weights themselves from the same files). For the
split the runs read at their steps (`shapes`, or `shapes_val` with --split; all files must have read the
same one) at the last step, and for the held-out split: each seed's pass@1, the arm's mean, and a - b with
the seed-aware interval over the tasks (evaluate/intervals.arm_difference: seeds need not be paired).
`--a-step` / `--b-step` read an arm's split at another step it was read at (shapes_ceiling.py reads step 0,
half way, the end and each --read-at step); the held-out split is read at the end only, so it is left out
then. `--paired` pairs the files seed by seed (a's and b's seeds must be the same, in the same order) and
uses evaluate/intervals.paired_arm_difference: for one run read at two steps (`--a run*.json --b run*.json
--a-step 90 --b-step 60`), where what a seed shares up to the earlier step cancels. `--alpha` sets the
intervals' two-sided level (default 0.05, a 95% interval): a design that looks at its runs more than once
judges each look at a smaller level (Pocock's two looks: 0.0294 each, a 97.06% interval), and every interval
line then names its level.

Beside each difference, the same interval over templates: each template's tasks averaged into one unit (a
task's name is its template's, then '-' and a hash: gym/generator.template_id), so the interval asks what
a new template would show rather than a new task of these templates. Tasks of one template share the fix
an arm teaches or misses, so when an arm moves some templates and not others the interval over tasks is
too narrow for new shapes: on `shapes_val` (15 templates) the two-line arm reads +0.040 [-0.048, +0.128]
over tasks and +0.039 [-0.099, +0.177] over templates (docs/STATISTICS.md, "Where the intervals fail").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch

from bugfix_rl.evaluate.intervals import arm_difference, paired_arm_difference
from bugfix_rl.evaluate.stats import several_per_template, template_means


def per_task_rates(files: list[Path], arm: str, split: str,
                   step: int | None = None) -> tuple[torch.Tensor, list[int], set[str], list[str]]:
    """[seeds, tasks] pass rates of `arm` on `split` ("shapes": the split the runs read at their steps, at
    `step`, default the last; or "heldout"), the seeds, the names of the splits read ("shapes" or
    "shapes_val") and the tasks' names (the first file's; every file must read the same tasks)."""
    rows, seeds, read, names = [], [], set(), None
    for path in files:
        try:
            run = json.loads(path.read_text())
            at = str(run["steps"] if step is None else step)
            readings = run["arms"][arm]["shapes"]
            if split != "heldout" and at not in readings:
                raise SystemExit(f"error: {path} read arm {arm!r} at steps {', '.join(readings)}, not {at}")
            result = run["arms"][arm]["heldout"] if split == "heldout" else readings[at]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise SystemExit(f"error: {path} is not a shapes_ceiling.py --out file with arm {arm!r}: {error!r}")
        rows.append([count / result["n"] for count in result["per_task"]])
        names = names or result.get("tasks_names")
        if result.get("tasks_names", names) != names:
            raise SystemExit(f"error: {path} read other tasks than the files before it")
        seeds.append(run["seed"])
        read.add(run.get("split", "shapes"))  # files written before --split read the shapes split
    return torch.tensor(rows, dtype=torch.float64), seeds, read, names or []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", nargs="+", type=Path, required=True, help="arm a: one JSON per seed")
    parser.add_argument("--b", nargs="+", type=Path, required=True, help="arm b: one JSON per seed")
    parser.add_argument("--arm", default="training", help="the arm of shapes_ceiling.py read in each file")
    parser.add_argument("--a-arm", help="the arm read in a's files (default: --arm)")
    parser.add_argument("--b-arm", help="the arm read in b's files (default: --arm; e.g. a's files again with "
                                        "--a-arm training_average --b-arm training)")
    parser.add_argument("--a-step", type=int, help="read arm a's split at this step (default: its last)")
    parser.add_argument("--b-step", type=int, help="read arm b's split at this step (default: its last)")
    parser.add_argument("--paired", action="store_true", help="pair a's and b's files seed by seed (the same seeds, in order)")
    parser.add_argument("--alpha", type=float, default=0.05, help="the intervals' two-sided level (default 0.05: 95%%)")
    args = parser.parse_args()
    if not 0 < args.alpha < 1:
        raise SystemExit(f"error: --alpha must lie between 0 and 1, got {args.alpha}")
    level = "" if args.alpha == 0.05 else f", {100 * (1 - args.alpha):.2f}% interval"
    at_the_end = args.a_step is None and args.b_step is None
    for split in ("shapes", "heldout") if at_the_end else ("shapes",):
        (a, seeds_a, read_a, names_a), (b, seeds_b, read_b, names_b) = (
            per_task_rates(args.a, args.a_arm or args.arm, split, args.a_step),
            per_task_rates(args.b, args.b_arm or args.arm, split, args.b_step))
        if len(read_a | read_b) > 1:
            raise SystemExit(f"error: the files read different splits ({', '.join(sorted(read_a | read_b))})")
        name = read_a.pop() if split == "shapes" else split  # the split the runs read: shapes or shapes_val
        if not at_the_end:
            name += (f" (a at step {'last' if args.a_step is None else args.a_step},"
                     f" b at step {'last' if args.b_step is None else args.b_step})")
        for label, rates, seeds in (("a", a, seeds_a), ("b", b, seeds_b)):
            per_seed = ", ".join(f"seed {s} {r:.3f}" for s, r in zip(seeds, rates.mean(-1).tolist()))
            print(f"{name}: {label}: {per_seed}; mean {rates.mean():.3f} ({rates.shape[1]} tasks)")
        if names_a != names_b:
            raise SystemExit("error: arm a and arm b read different tasks")
        if a.shape[-1] != b.shape[-1] or min(len(seeds_a), len(seeds_b)) < 2:
            raise SystemExit("error: each arm needs at least 2 seeds' files, read on the same tasks")
        if args.paired and seeds_a != seeds_b:
            raise SystemExit(f"error: --paired needs the same seeds in a and b, in order; got {seeds_a} and {seeds_b}")
        difference = paired_arm_difference if args.paired else arm_difference
        seeds = f"paired by seed: {a.shape[0]} seeds" if args.paired else f"seed-aware: {a.shape[0]} + {b.shape[0]} seeds"
        diff = difference(a, b, args.alpha)
        print(f"{name}: a - b {float(diff.diff):+.3f} [{float(diff.lo):+.3f}, {float(diff.hi):+.3f}] "
              f"({seeds}, {a.shape[1]} tasks{level})")
        # files without task names (hand-made ones) and the book's held-out tasks (one per name) get no second line
        if several_per_template(names_a):
            ta, tb = template_means(a, names_a), template_means(b, names_b)
            over = difference(ta, tb, args.alpha)
            print(f"{name}: a - b {float(over.diff):+.3f} [{float(over.lo):+.3f}, {float(over.hi):+.3f}] "
                  f"over templates ({seeds}, {ta.shape[1]} templates, each its tasks' mean{level})")


if __name__ == "__main__":
    main()
