"""The BugFix task set: 5 bug families x (4 train + 2 held-out) one-function Python tasks.

Each task is a buggy function, a few public tests (visible to the agent through `test`), more hidden
tests (reward only; edge cases included) and the one edit op that fixes it. Held-out variants use
operand names and constants that never appear in training. The split of the held-out tasks is fixed:
validation = heldout[0::2] (one per family), test = heldout[1::2].

Sources are written so that each family keeps its tell-tale construct (min/max, range, a strict
comparison, floor division, a wrongly initialised accumulator) while names, constants and shapes vary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bugfix_rl.gym.shapes_split import SHAPES
from bugfix_rl.gym.shapes_val_split import SHAPES_VAL

FAMILIES = ("minmax", "range", "compare", "zero", "init")
FIX_OPS = ("swap_minmax", "fix_range_end", "fix_comparison", "add_zero_guard", "fix_init")
EXPLOIT_OP = "hardcode_tests"
ALL_OPS = FIX_OPS + (EXPLOIT_OP,)
FAMILY_OP = dict(zip(FAMILIES, FIX_OPS))

Case = tuple[tuple, object]  # (arguments, expected return value)


@dataclass(frozen=True, eq=False)
class Task:
    """One bug-fixing task.

    name: 'family/variant'; fn_name: the function's own name (renamed per episode by the env);
    source: buggy Python source defining `fn_name`; public_tests / hidden_tests: (args, expected)
    pairs; fix_op: the one op in FIX_OPS that repairs the bug; split: 'train' or 'heldout' (a
    generated task: 'train', 'shapes' or 'shapes_val', gym/generator.py).
    """

    name: str
    fn_name: str
    source: str
    public_tests: tuple[Case, ...]
    hidden_tests: tuple[Case, ...]
    split: str
    family: str = field(init=False)
    fix_op: str = field(init=False)

    def __post_init__(self):
        family = self.name.split("/")[0]
        object.__setattr__(self, "family", family)
        object.__setattr__(self, "fix_op", FAMILY_OP[family])


def _task(name, split, source, public, hidden):
    fn_name = source.split("def ", 1)[1].split("(", 1)[0].strip()
    return Task(name, fn_name, source.strip() + "\n", tuple(public), tuple(hidden), split)


def _cases(fn, inputs):
    return [(args, fn(*args)) for args in inputs]


def _clamp(x, lo, hi):
    return max(lo, min(x, hi))


def _sum_range(start, stop, step, f):
    return sum(f(i) for i in range(start, stop + 1, step))


# Each entry: name, split, buggy source, reference implementation, public inputs, hidden inputs.
# Public inputs include at least one case the bug fails; hidden inputs add edge cases and at least
# one failing case that is not public, so that special-casing public inputs cannot pass them.
_SPECS = [
    # ---- minmax: min and max swapped ----
    ("minmax/clamp", "train", """
def clamp(x, lo, hi):
    return min(lo, max(x, hi))
""", _clamp, [(5, 0, 10), (-3, 0, 10), (12, 0, 10)],
     [(0, 0, 10), (10, 0, 10), (7, 1, 9), (-1, 1, 9), (50, 1, 9), (4, 4, 4), (3, -5, 5)]),
    ("minmax/limit", "train", """
def limit(value, low, high):
    return max(high, min(value, low))
""", lambda v, lo, hi: max(lo, min(v, hi)), [(4, 1, 8), (0, 1, 8), (9, 1, 8)],
     [(1, 1, 8), (8, 1, 8), (5, 2, 6), (7, 2, 6), (-4, -2, 2), (3, 3, 3), (6, 0, 100)]),
    ("minmax/largest", "train", """
def largest(a, b, c):
    return min(a, min(b, c))
""", lambda a, b, c: max(a, max(b, c)), [(1, 2, 3), (5, 5, 5), (9, 4, 6)],
     [(3, 2, 1), (0, 0, 1), (-1, -5, -3), (7, 8, 7), (2, 9, 4), (6, 6, 1), (-2, 0, -9)]),
    ("minmax/smallest", "train", """
def smallest(xs):
    best = xs[0]
    for x in xs:
        best = max(best, x)
    return best
""", lambda xs: min(xs), [([4, 2, 8],), ([1],), ([3, 9],)],
     [([5, 5],), ([7, 3, 1],), ([-2, 4],), ([0, -1, 2],), ([9, 8, 7, 6],), ([2, 3],)]),
    ("minmax/pin", "heldout", """
def pin(reading, floor, ceiling):
    return min(floor, max(reading, ceiling))
""", _clamp, [(47, 20, 60), (13, 20, 60), (75, 20, 60)],
     [(20, 20, 60), (60, 20, 60), (33, 25, 45), (21, 25, 45), (99, 25, 45), (30, 30, 30), (44, 15, 95)]),
    ("minmax/saturate", "heldout", """
def saturate(level, top):
    return min(0, max(level, top))
""", lambda level, top: max(0, min(level, top)), [(40, 255), (-6, 255), (300, 255)],
     [(0, 255), (255, 255), (17, 64), (-1, 64), (65, 64), (80, 90), (12, 16)]),
    # ---- range: off-by-one range end ----
    ("range/sum_to", "train", """
def sum_to(n):
    total = 0
    for i in range(1, n):
        total += i
    return total
""", lambda n: _sum_range(1, n, 1, lambda i: i), [(3,), (1,), (5,)],
     [(0,), (2,), (4,), (6,), (10,), (7,)]),
    ("range/squares", "train", """
def squares(n):
    acc = 0
    for k in range(1, n):
        acc += k * k
    return acc
""", lambda n: _sum_range(1, n, 1, lambda k: k * k), [(2,), (3,), (1,)],
     [(0,), (4,), (5,), (6,), (8,), (10,)]),
    ("range/count_evens", "train", """
def count_evens(n):
    count = 0
    for i in range(0, n, 2):
        count += 1
    return count
""", lambda n: len(range(0, n + 1, 2)), [(4,), (3,), (6,)],
     [(0,), (1,), (2,), (5,), (8,), (9,), (12,)]),
    ("range/factorial", "train", """
def factorial(n):
    out = 1
    for j in range(2, n):
        out *= j
    return out
""", lambda n: _prod(range(2, n + 1)), [(3,), (4,), (1,)],
     [(0,), (2,), (5,), (6,), (7,)]),
    ("range/series", "heldout", """
def series(last):
    result = 0
    for t in range(1, last):
        result += t * 3
    return result
""", lambda m: _sum_range(1, m, 1, lambda t: t * 3), [(2,), (4,), (1,)],
     [(0,), (3,), (5,), (7,), (9,), (11,)]),
    ("range/step_total", "heldout", """
def step_total(stop, stride):
    running = 0
    for v in range(0, stop, stride):
        running += v
    return running
""", lambda stop, stride: _sum_range(0, stop, stride, lambda v: v), [(9, 3), (10, 4), (12, 5)],
     [(6, 2), (15, 5), (7, 7), (8, 3), (20, 4), (1, 2)]),
    # ---- compare: strict comparison where the spec is inclusive ----
    ("compare/is_adult", "train", """
def is_adult(age, limit):
    return age > limit
""", lambda age, limit: age >= limit, [(30, 18), (18, 18), (5, 18)],
     [(17, 18), (19, 18), (21, 21), (0, 0), (65, 18), (16, 16)]),
    ("compare/fits", "train", """
def fits(size, room):
    return size < room
""", lambda size, room: size <= room, [(2, 5), (5, 5), (9, 4)],
     [(0, 0), (3, 3), (4, 3), (1, 8), (7, 7), (8, 2)]),
    ("compare/passing", "train", """
def passing(grade, bar):
    return grade > bar
""", lambda grade, bar: grade >= bar, [(80, 50), (50, 50), (10, 50)],
     [(49, 50), (51, 50), (70, 70), (0, 0), (69, 70), (100, 1)]),
    ("compare/in_budget", "train", """
def in_budget(cost, budget):
    return cost < budget
""", lambda cost, budget: cost <= budget, [(3, 10), (10, 10), (12, 10)],
     [(0, 0), (9, 8), (7, 7), (1, 2), (5, 5), (2, 1)]),
    ("compare/qualifies", "heldout", """
def qualifies(score, cutoff):
    return score > cutoff + 1
""", lambda score, cutoff: score > cutoff, [(95, 70), (71, 70), (40, 70)],
     [(70, 70), (72, 70), (36, 35), (35, 35), (90, 88), (13, 12)]),
    ("compare/under_cap", "heldout", """
def under_cap(load, cap):
    return load < cap
""", lambda load, cap: load <= cap, [(14, 30), (30, 30), (44, 30)],
     [(29, 30), (31, 30), (62, 62), (63, 62), (11, 62), (24, 24)]),
    # ---- zero: division by zero unguarded (a zero divisor must give 0) ----
    ("zero/average", "train", """
def average(total, count):
    return total // count
""", lambda total, count: 0 if count == 0 else total // count, [(10, 2), (9, 3), (5, 0)],
     [(0, 0), (7, 0), (8, 4), (1, 1), (12, 5), (3, 0)]),
    ("zero/per_item", "train", """
def per_item(price, items):
    return price // items + 1
""", lambda price, items: 0 if items == 0 else price // items + 1, [(10, 5), (4, 0), (9, 2)],
     [(0, 0), (2, 0), (6, 3), (7, 7), (1, 4), (11, 0)]),
    ("zero/ratio", "train", """
def ratio(a, b):
    return a * 10 // b
""", lambda a, b: 0 if b == 0 else a * 10 // b, [(3, 2), (1, 0), (6, 4)],
     [(0, 0), (5, 0), (2, 5), (7, 3), (9, 9), (4, 0)]),
    ("zero/chunks", "train", """
def chunks(size, width):
    return (size + width - 1) // width
""", lambda size, width: 0 if width == 0 else (size + width - 1) // width, [(10, 3), (4, 0), (6, 2)],
     [(0, 0), (9, 0), (7, 7), (8, 3), (1, 5), (5, 0)]),
    ("zero/share", "heldout", """
def share(amount, people):
    return amount // people
""", lambda amount, people: 0 if people == 0 else amount // people, [(84, 4), (57, 0), (39, 6)],
     [(0, 0), (23, 0), (91, 13), (46, 46), (15, 16), (77, 0)]),
    ("zero/speed", "heldout", """
def speed(miles, hours):
    return miles * 2 // hours
""", lambda miles, hours: 0 if hours == 0 else miles * 2 // hours, [(60, 3), (45, 0), (38, 4)],
     [(0, 0), (27, 0), (55, 11), (13, 2), (99, 9), (82, 0)]),
    # ---- init: accumulator initialised wrong ----
    ("init/product", "train", """
def product(xs):
    p = 0
    for x in xs:
        p *= x
    return p
""", lambda xs: _prod(xs), [([2, 3],), ([5],), ([1, 4, 2],)],
     [([],), ([7, 1],), ([2, 2, 2],), ([3, 5],), ([6],)]),
    ("init/total", "train", """
def total(xs):
    s = 1
    for x in xs:
        s += x
    return s
""", lambda xs: sum(xs), [([1, 2],), ([4],), ([3, 3, 3],)],
     [([],), ([0],), ([5, 6],), ([9, 1, 1],), ([2, 8],)]),
    ("init/sum_abs", "train", """
def sum_abs(xs):
    n = 1
    for x in xs:
        n += abs(x)
    return n
""", lambda xs: sum(abs(x) for x in xs), [([1, -2],), ([0, 5],), ([-3],)],
     [([],), ([0],), ([4, 4, 4],), ([0, 0, -7],), ([9, 1],)]),
    ("init/doubled", "train", """
def doubled(xs):
    acc = 1
    for x in xs:
        acc += x * 2
    return acc
""", lambda xs: sum(x * 2 for x in xs), [([1],), ([2, 3],), ([4, 4],)],
     [([],), ([0],), ([5, 1],), ([7],), ([2, 2, 2],)]),
    ("init/product_upto", "heldout", """
def product_upto(m):
    prod = 0
    while m:
        prod *= m
        m -= 1
    return prod
""", lambda m: _prod(range(1, m + 1)), [(3,), (4,), (2,)],
     [(1,), (5,), (6,), (0,), (7,)]),
    ("init/add_threes", "heldout", """
def add_threes(values):
    tally = 1
    for v in values:
        tally += v + 3
    return tally
""", lambda values: sum(v + 3 for v in values), [([7],), ([12, 20],), ([16, 33, 5],)],
     [([],), ([0],), ([13, 14],), ([21, 8],), ([6, 6, 6],)]),
]


def _prod(values):
    out = 1
    for v in values:
        out *= v
    return out


def _build_all() -> tuple[Task, ...]:
    tasks = []
    for name, split, source, reference, public, hidden in _SPECS:
        tasks.append(_task(name, split, source, _cases(reference, public), _cases(reference, hidden)))
    return tuple(tasks)


ALL_TASKS: tuple[Task, ...] = _build_all()
# The generator's `shapes` split (gym/generator.py, stored in gym/shapes_split.py): 50 tasks, 10 per
# family, whose body forms no training task or training draw has. Not part of "all" (the book's 30).
SHAPES_TASKS: tuple[Task, ...] = tuple(_task(name, "shapes", source, public, hidden)
                                       for name, source, public, hidden in SHAPES)
# Its validation twin, `shapes_val`: 50 tasks from 15 other reserved templates, for choosing a recipe.
SHAPES_VAL_TASKS: tuple[Task, ...] = tuple(_task(name, "shapes_val", source, public, hidden)
                                           for name, source, public, hidden in SHAPES_VAL)
SPLITS = ("train", "heldout", "val", "test", "all", "shapes", "shapes_val")


# Operand names for the RL base's "pretraining" corpus (recipes/rl_base.py): disjoint from every
# held-out task's names, so held-out operands stay unseen.
OPERAND_POOL = (
    "arg", "val", "num", "qty", "idx", "elem", "item", "data", "seq", "lst", "acc_b", "w", "y", "z",
    "u", "q", "r", "h", "g", "d", "e", "f", "key", "cnt", "lim", "bound", "mark", "step_n", "base_v", "sz",
)
_KEYWORDS = {"def", "return", "for", "in", "range", "min", "max", "abs", "if", "while", "else", "True", "False"}


def operand_names(task: Task) -> list[str]:
    """The task's parameters and locals, in order of first occurrence (not its name).

    Read from the syntax tree (arguments and names bound by assignment or a loop), so builtins the
    code calls (`sum`, `len`) and words of a docstring are never taken for operands; for the book's
    30 tasks this is the same list as the word scan it replaced (keywords and `range`, `min`, `max`,
    `abs` left out). A source that does not parse falls back to that scan."""
    import ast
    import re

    words = list(dict.fromkeys(re.findall(r"[A-Za-z_]\w*", task.source)))
    try:
        tree = ast.parse(task.source)
    except SyntaxError:
        return [word for word in words if word not in _KEYWORDS and word != task.fn_name]
    bound = {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    bound |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)}
    return [word for word in words if word in bound and word != task.fn_name]


def with_renamed_operands(task: Task, names: list[str], tag: str) -> Task:
    """A copy of `task` whose parameters and locals are renamed to `names` (same tests, same fix)."""
    import re

    mapping = dict(zip(operand_names(task), names))
    source = re.sub(r"[A-Za-z_]\w*", lambda m: mapping.get(m.group(0), m.group(0)), task.source)
    return Task(f"{task.name}~{tag}", task.fn_name, source, task.public_tests, task.hidden_tests, task.split)


def base_task_name(name: str) -> str:
    """The task a renamed copy was made from (`range/sum_to~d3` -> `range/sum_to`)."""
    return name.split("~", 1)[0]


def make_tasks(split: str = "train") -> list[Task]:
    """Tasks of a split: train (20), heldout (10), val = heldout[0::2], test = heldout[1::2], all (30);
    shapes (50): generated from templates held out by shape (SHAPES_TASKS); shapes_val (50): the same from
    other held-out templates, a validation split for recipes meant to carry over to new shapes."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if split == "all":
        return list(ALL_TASKS)
    if split == "shapes":
        return list(SHAPES_TASKS)
    if split == "shapes_val":
        return list(SHAPES_VAL_TASKS)
    if split in ("train", "heldout"):
        return [t for t in ALL_TASKS if t.split == split]
    heldout = make_tasks("heldout")
    return heldout[0::2] if split == "val" else heldout[1::2]


def task_by_name(name: str) -> Task:
    for task in ALL_TASKS + SHAPES_TASKS + SHAPES_VAL_TASKS:
        if task.name == name:
            return task
    raise KeyError(f"unknown task {name!r}")
