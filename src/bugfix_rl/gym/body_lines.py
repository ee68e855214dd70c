"""A task body's shape, line by line: what "held out by shape" compares (tests/test_generator.py), what
a grammar draw may not hold all of (gym/generator.py) and how near a training pool comes to the `shapes`
split (scripts/shapes_nearness.py)."""

from __future__ import annotations

from bugfix_rl.gym import ops
from bugfix_rl.gym.tasks import Task, operand_names

_BLANK = {"min": "M", "max": "M", "<": "R", "<=": "R", ">": "R", ">=": "R"}


def body_line_shapes(task: Task, source: str | None = None) -> list[str]:
    """The body's lines without the docstring: operand names -> N, numbers -> C, min/max -> M, < <= > >=
    -> R (a mirrored draw has the same shape), each after its indentation's width. `source`: another
    version of the task's function (its fixed one, say) blanked by the task's operand names."""
    operands = set(operand_names(task))
    lines = []
    for line in (task.source if source is None else source).splitlines()[1:]:
        if line.strip().startswith('"""'):
            continue
        words = ["N" if w in operands else "C" if w.isdigit() else _BLANK.get(w, w)
                 for w in ops._TOKEN.findall(line)]  # noqa: SLF001  the gym's own tokenizer
        lines.append(f"{len(line) - len(line.lstrip())} {' '.join(words)}")
    return lines
