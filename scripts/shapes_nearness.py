"""How near the training pool comes to the `shapes` split, line by line.

    .venv/bin/python scripts/shapes_nearness.py [--reshape 0.5] [--grammar 1.0] [--generated 200] [--seed 0]

For each `shapes` task: how many of its body's lines (gym/body_lines.body_line_shapes: names, numbers,
min/max and order comparisons blanked, indentation kept, docstring left out) are missing from the
nearest body of the training pool (the book's 20 and the generated tasks of env.generated_tasks,
env.generated_seed, env.generated_reshape and env.generated_grammar), counted as multisets. 0 would mean
some training body holds every line of a shapes body; the generator drops a reshaped draw when its whole
body form is a reserved template's and a grammar draw when it holds every line of a shapes body, so this
shows how close the training draws come line by line.
"""

from __future__ import annotations

import argparse
import collections

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)

from bugfix_rl.gym.body_lines import body_line_shapes
from bugfix_rl.gym.generator import generated_tasks
from bugfix_rl.gym.tasks import make_tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reshape", type=float, default=0.0)
    parser.add_argument("--grammar", type=float, default=0.0)
    parser.add_argument("--generated", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    generated = generated_tasks(args.generated, args.seed, reshape=args.reshape, grammar=args.grammar)
    tasks = make_tasks("train") + generated
    pool = [collections.Counter(body_line_shapes(task)) for task in tasks]
    missing = collections.Counter()
    for task in make_tasks("shapes"):
        shapes = collections.Counter(body_line_shapes(task))
        missing[sum(shapes.values()) - max(sum((shapes & body).values()) for body in pool)] += 1
    print(f"training pool: the book's 20 + {args.generated} generated (seed {args.seed}, reshape {args.reshape}, "
          f"grammar {args.grammar}); "
          f"shapes tasks by lines missing from their nearest training body: "
          + ", ".join(f"{lines} missing: {count}" for lines, count in sorted(missing.items())))


if __name__ == "__main__":
    main()
