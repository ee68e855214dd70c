"""How near the training pool comes to the `shapes` split, line by line.

    .venv/bin/python scripts/shapes_nearness.py [--reshape 0.5] [--generated 200] [--seed 0]

For each `shapes` task: how many of its body's lines (names, numbers, min/max and order comparisons
blanked, as tests/test_generator.py's body_shape does; docstring left out) are missing from the
nearest body of the training pool (the book's 20 and the generated tasks of env.generated_tasks,
env.generated_seed and env.generated_reshape), counted as multisets. 0 would mean some training body
holds every line of a shapes body; the generator drops a draw only when its whole body form is a
reserved template's, so this shows how close the training draws come line by line.
"""

from __future__ import annotations

import argparse
import collections

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)

from bugfix_rl.gym import ops
from bugfix_rl.gym.generator import generated_tasks
from bugfix_rl.gym.tasks import Task, make_tasks, operand_names

_BLANK = {"min": "M", "max": "M", "<": "R", "<=": "R", ">": "R", ">=": "R"}


def line_shapes(task: Task) -> collections.Counter:
    operands = set(operand_names(task))
    shapes = collections.Counter()
    for line in task.source.splitlines()[1:]:
        if not line.strip().startswith('"""'):
            shapes[" ".join("N" if w in operands else "C" if w.isdigit() else _BLANK.get(w, w)
                            for w in ops._TOKEN.findall(line))] += 1  # noqa: SLF001  the gym's tokenizer
    return shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reshape", type=float, default=0.0)
    parser.add_argument("--generated", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    pool = [line_shapes(t) for t in make_tasks("train") + generated_tasks(args.generated, args.seed,
                                                                          reshape=args.reshape)]
    missing = collections.Counter()
    for task in make_tasks("shapes"):
        shapes = line_shapes(task)
        missing[sum(shapes.values()) - max(sum((shapes & body).values()) for body in pool)] += 1
    print(f"training pool: the book's 20 + {args.generated} generated (seed {args.seed}, reshape {args.reshape}); "
          f"shapes tasks by lines missing from their nearest training body: "
          + ", ".join(f"{lines} missing: {count}" for lines, count in sorted(missing.items())))


if __name__ == "__main__":
    main()
