"""Shape variants of the training tasks: the same bug on a line of another shape (data augmentation).

TinyAgent learns its lines from 20 training sources. Renaming operands (`with_renamed_operands`)
varies the names but not the shapes, and with one shared identifier embedding a renamed copy looks
the same to the network, so the agent learns line continuations by heart ("after `* 2` the line
ends", from `acc += x * 2`) and miscopies a held-out line whose shape differs (`miles * 2 // hours`).
A shape variant changes one operand or literal of a training task's buggy body:

- literal: an operand occurrence becomes a constant (`min ( lo , ...` -> `min ( 1 , ...`);
- scaled:  an operand occurrence `x` becomes `x * c` or `x + c`;
- operand: a literal becomes one of the function's parameters;
- specialize: a parameter the body reads becomes a constant everywhere and leaves the def line (one
  argument fewer; each test's arguments lose it).

Without specialize every function of a family has the same number of parameters, and the agent keyed
its fix on that: probed teacher-forced (seed 0, `+exp=tools` with a pad kind, 80 steps), it gave the
min/max swap of `return min ( 0 , max ( level , top ) )` probability 0.00 under a two-parameter def
line and above 0.9 under a three-parameter one, with literal 0 or 1 alike.

The bug's family and its fix op stay the same. Its tests are recomputed by differential testing: the
expected value of each of the task's inputs is what the family's fix, applied to the variant, returns
(trusted code, run in-process like the edit menu's). A variant is kept only if that fix runs without
an error on every input and is not a constant function, the buggy variant fails at least one public
and one hidden input, and no line
of it, buggy or fixed, equals a line of a held-out task that no training task has, once operand
names are blanked out (so the held-out lines stay unseen as shapes, not only as names). Constants come from the training sources
only (`TRAIN_CONSTANTS`).
"""

from __future__ import annotations

import hashlib
import random
import re
from functools import lru_cache

from bugfix_rl.gym import ops
from bugfix_rl.gym.tasks import Task, base_task_name, make_tasks, operand_names

TRAIN_CONSTANTS = ("0", "1", "2", "10")  # every number in the training sources (held-out ones: 3, 255, ...)
KINDS = ("literal", "scaled", "operand", "specialize")
KIND_WEIGHTS = (1, 1, 1, 2)  # specialize twice as often: of its draws, only the ones on a 2+ parameter function count
_WORD = re.compile(r"[A-Za-z_]\w*|\d+")
_BOOK_TRAINING_NAMES = frozenset(task.name for task in make_tasks("train"))  # the tasks variants are made of


def _blanked(line: str, operands: set[str]) -> str:
    """A line's code tokens with every operand name replaced by `N` (indentation and spacing dropped)."""
    return " ".join("N" if word in operands else word for word in ops._TOKEN.findall(line))


def _line_shapes(split: str) -> set[str]:
    """Every line of every task of `split`, buggy and fixed, with operand names blanked out."""
    shapes = set()
    for task in make_tasks(split):
        operands = set(operand_names(task))
        fixed = ops.apply_op(task, task.source, task.fix_op)
        for source in (task.source, fixed):
            shapes.update(_blanked(line, operands) for line in source.splitlines() if line.strip())
    return shapes


@lru_cache(maxsize=1)
def unseen_heldout_line_shapes() -> frozenset[str]:
    """The held-out tasks' line shapes (buggy and fixed, operand names blanked) that no training task
    has: a variant must not write one (`return N * 2 // N`, `return min ( 0 , max ( N , N ) )`, ...)."""
    return frozenset(_line_shapes("heldout") - _line_shapes("train"))


def _body_slots(source: str, operands: set[str]) -> list[tuple[int, int, str]]:
    """(start, end, word) of each operand or number in the body that a variant may change: not on the
    def line, not an assignment target, not a loop variable."""
    slots = []
    offset = len(source.split("\n", 1)[0]) + 1
    for line in source[offset:].split("\n"):
        targets = set(re.findall(r"^\s*(\w+)\s*[-+*/]?=(?!=)", line)) | set(re.findall(r"\bfor\s+(\w+)\s+in\b", line))
        for match in _WORD.finditer(line):
            word = match.group(0)
            subscripted = line[match.end():].lstrip().startswith("[")  # `xs[0]`: a literal cannot be indexed
            if ((word in operands and word not in targets) or word.isdigit()) and not subscripted:
                slots.append((offset + match.start(), offset + match.end(), word))
        offset += len(line) + 1
    return slots


def _with_params(source: str, params: list[str]) -> str:
    head, body = source.split("\n", 1)
    return head.split("(", 1)[0] + "(" + ", ".join(params) + "):\n" + body


def _same_args(args: tuple) -> tuple:
    return args


def _changed(task: Task, rng: random.Random):
    """(the task's source with one change of a random kind, how each test's arguments change), or None
    when that kind has nothing to change."""
    source, operands = task.source, set(operand_names(task))
    params = re.findall(r"\w+", source.split("(", 1)[1].split(")", 1)[0])
    kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
    if kind == "specialize":
        used = sorted({w for _, _, w in _body_slots(source, operands) if w in params})
        if len(params) < 2 or not used:
            return None
        name, value = rng.choice(used), rng.choice(TRAIN_CONSTANTS)
        index = params.index(name)
        head, body = source.split("\n", 1)
        specialized = _with_params(head + "\n" + re.sub(rf"\b{name}\b", value, body), [p for p in params if p != name])
        return specialized, lambda args: args[:index] + args[index + 1:]
    slots = [s for s in _body_slots(source, operands) if s[2].isdigit() == (kind == "operand")]
    if not slots:
        return None
    start, end, word = rng.choice(slots)
    if kind == "literal":
        replacement = rng.choice([c for c in TRAIN_CONSTANTS if c != word])
    elif kind == "scaled":
        replacement = f"{word} {rng.choice('*+')} {rng.choice(TRAIN_CONSTANTS[1:])}"
    else:
        replacement = rng.choice(params)
    return source[:start] + replacement + source[end:], _same_args


def _graded(task: Task, source: str, new_args, tag: str) -> Task | None:
    """The variant with tests recomputed from its fix, or None if it breaks a rule of the module doc.
    new_args maps a test's arguments to the variant's (specialize drops one)."""
    fixed = ops.apply_op(task, source, task.fix_op)
    if fixed is None or fixed == source:
        return None
    operands = set(operand_names(task))
    shapes = unseen_heldout_line_shapes()
    if any(_blanked(line, operands) in shapes for text in (source, fixed) for line in text.splitlines() if line.strip()):
        return None
    public_cases = tuple((new_args(args), None) for args, _ in task.public_tests)
    hidden_cases = tuple((new_args(args), None) for args, _ in task.hidden_tests)
    try:
        public = ops.run_cases(fixed, task.fn_name, public_cases)
        hidden = ops.run_cases(fixed, task.fn_name, hidden_cases)
    except Exception:  # a variant that does not compile
        return None
    if any(out is ops._ERROR for out in public + hidden):
        return None
    if len({repr(out) for out in public + hidden}) == 1:
        return None  # the fix is a constant function (`x // 0` guarded by `if 0 == 0`)
    public_tests = tuple((args, out) for (args, _), out in zip(public_cases, public))
    hidden_tests = tuple((args, out) for (args, _), out in zip(hidden_cases, hidden))
    variant = Task(f"{task.name}~{tag}", task.fn_name, source, public_tests, hidden_tests, task.split)
    buggy = ops._make_state(variant, source)  # the env's own grading of the buggy code (not cached)
    return None if buggy.public_pass == 1 or buggy.hidden_pass else variant


def shape_variant(task: Task, rng: random.Random, tries: int = 16) -> Task | None:
    """A shape variant of a training task (module doc), drawn with `rng`, or None if `tries` draws all
    broke a rule. Its name is `<task>~s<hash of its source>`, unique per source (gym/ops.py caches by name).

    A generated training task (gym/generator.py) gets None without a draw: its templates give it shapes
    of its own, and a variant of a `while` body (`n = n - 2`) can loop forever where the fix runs in-process."""
    if task.split != "train":
        raise ValueError(f"shape variants are made from training tasks only, not {task.name!r}")
    if base_task_name(task.name) not in _BOOK_TRAINING_NAMES:
        return None
    for _ in range(tries):
        changed = _changed(task, rng)
        if changed is None:
            continue
        source, new_args = changed
        variant = _graded(task, source, new_args, "s" + hashlib.sha256(source.encode()).hexdigest()[:8])
        if variant is not None:
            return variant
    return None
