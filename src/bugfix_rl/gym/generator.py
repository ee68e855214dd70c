"""Task generators, one per bug family: as many distinct, checked tasks as asked, deterministic by seed.

API:

    generated_tasks(n, seed=0, sandbox=None, reshape=0.0, grammar=0.0, flat_pairs=False, two_line_minmax=0.0,
                    two_line_compare=0.0)
        Training draws: n tasks from TRAINING templates only, families in turn (minmax, range, compare,
        zero, init, minmax, ...). Same seed -> identical tasks, byte for byte; split 'train'. With
        reshape > 0, that share of the draws has its body rewritten with helper locals (gym/reshape.py),
        and a draw whose body form is a reserved template's is dropped. With grammar > 0, that share of
        the draws takes a body form composed afresh (gym/grammar.py: template id 'family/grammar'), and
        such a draw is dropped when its body, buggy or fixed, holds every line of a `shapes` or
        `shapes_val` task's body (gym/body_lines.py's blanking, as multisets). flat_pairs: the grammar's
        minmax bodies with two min/max lines draw flat calls (gym/grammar.grammar_template).
        two_line_minmax > 0: after the draw, that share of the minmax tasks is replaced by grammar
        minmax tasks (flat pairs) whose fix spans two lines, chosen and drawn from a stream of their
        own, so every other task is the one drawn without it. two_line_compare > 0: the same for the
        compare tasks, replaced by grammar compare tasks with two comparisons on adjacent lines.
    training_pool(env_cfg, sandbox=None) -> list[Task]
        What RL groups and the RL base's demonstrations draw from: the book's 20 training tasks, then
        env.generated_tasks generated ones (seed env.generated_seed, reshaped share env.generated_reshape,
        grammar share env.generated_grammar, flat pairs env.generated_grammar_flat_pairs, two-line minmax
        and compare shares env.generated_two_line_minmax and env.generated_two_line_compare) when that is > 0.
    make_tasks("shapes")  (gym/tasks.py)
        The `shapes` split: 50 tasks (10 per family) from RESERVED templates, which training draws
        never use; stored in gym/shapes_split.py (what `shapes_tasks()` gives, written by
        `python -m bugfix_rl.gym.generator`; a test checks the two agree). Split 'shapes'.
    make_tasks("shapes_val")
        The `shapes_val` split: 50 tasks (10 per family) from the reserved VALIDATION templates (other
        body forms than the `shapes` ones, held out from training as well), to choose a recipe on
        without reading the `shapes` split; stored in gym/shapes_val_split.py. Split 'shapes_val'.
    shapes_tasks(seed=SHAPES_SEED, per_family=10, sandbox=None, split="shapes") -> list[Task]
        Builds either split afresh.
    template_id(task) -> 'family/form'
        The template a generated task was drawn from (its name is `<template id>-<digest>`).

How a task is made (gym/templates.py holds the templates): a template is the body of the correct
function with placeholders; names come from tasks.OPERAND_POOL (parameters, locals) and
edit_menu.RENAME_POOL (the function), constants from CONSTANTS (numbers that only held-out sources
use are left out, as are held-out operand names). The correct `FunctionDef` is built with `ast`
(one to three parameters, sometimes a default on the last one, sometimes a one-line docstring), the
family's bug is injected into a copy of the tree (templates.py's table), and both are unparsed.
Tests are chosen by differential testing over ~60 drawn inputs (ties between arguments, edge values
and the template's constants drawn often): expected values are the correct function's (trusted code,
run in-process as the edit menu runs it); 3 public tests, at least one failing on the bug; 6 hidden
tests on other inputs, at least one failing on the bug, one on which each other op that applies
fails, and, with a default argument, calls that omit it (gym/differential_tests.py).

Each candidate is then checked (gym/task_checks.py, the rules the book's tasks pass) and redrawn
when it breaks one; it is also redrawn when its source equals a book task's or an earlier draw's,
or a line of it, buggy or fixed, has the shape of a held-out line no training task has
(shape_variants.unseen_heldout_line_shapes). The checks run the scripted oracles in both envs; the
tools env's episode runs on a sandbox (`sandbox`, or one opened for the call).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import pprint
import random
import re
import sys
import time
from collections import Counter
from functools import cache

from bugfix_rl.gym import ops
from bugfix_rl.gym.agents.scripted_tools import line_edit
from bugfix_rl.gym.body_lines import body_line_shapes
from bugfix_rl.gym.differential_tests import KINDS, choose_tests, draw_inputs
from bugfix_rl.gym.edit_menu import RENAME_POOL
from bugfix_rl.gym.grammar import grammar_template
from bugfix_rl.gym.reshape import body_form, reshape
from bugfix_rl.gym.shape_variants import _blanked, unseen_heldout_line_shapes
from bugfix_rl.gym.task_checks import task_problems
from bugfix_rl.gym.tasks import ALL_TASKS, FAMILIES, OPERAND_POOL, Task, make_tasks, operand_names
from bugfix_rl.gym.templates import HELD_OUT_TEMPLATES, INT_KINDS, SPLIT_TEMPLATES, TRAINING_TEMPLATES, Template
from bugfix_rl.sandbox import Sandbox, SandboxConfig

SHAPES_SEED = 0
MAX_DRAWS = 200  # candidates per task before generation gives up (about 1.03 are drawn per task)
_NUMBER = re.compile(r"\b\d+\b")
_HELDOUT_ONLY_NUMBERS = ({n for t in make_tasks("heldout") for n in _NUMBER.findall(t.source)}
                         - {n for t in make_tasks("train") for n in _NUMBER.findall(t.source)})
CONSTANTS = tuple(c for c in (2, 3, 4, 5, 6, 7, 8, 9) if str(c) not in _HELDOUT_ONLY_NUMBERS)
_HELDOUT_NAMES = {name for t in make_tasks("heldout") for name in operand_names(t)}
NAMES = tuple(name for name in OPERAND_POOL if name not in _HELDOUT_NAMES)
DOCSTRINGS = ("Return the answer.", "Compute the answer from the inputs.", "Work out the value asked for.")
_PLACEHOLDERS = ("A", "B", "C", "P", "Q", "I", "R")
_BOOK_SOURCES = {task.source for task in ALL_TASKS}


def template_id(task: Task) -> str:
    return task.name.rsplit("-", 1)[0]


# ---------------------------------------------------------------- the syntax tree

class _Fill(ast.NodeTransformer):
    """Placeholders -> drawn names and constants; TERM -> its drawn expression."""

    def __init__(self, names: dict[str, str], constants: dict[str, int], term: ast.expr | None):
        self.names, self.constants, self.term = names, constants, term

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == "TERM":
            return self.visit(copy.deepcopy(self.term))
        if node.id in self.constants:
            return ast.Constant(self.constants[node.id])
        return ast.Name(self.names.get(node.id, node.id), node.ctx)


def _swap_minmax(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            node.func.id = "max" if node.func.id == "min" else "min"


_MIRROR = {ast.GtE: ast.LtE, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.Lt: ast.Gt}
_STRICT = {ast.GtE: ast.Gt, ast.LtE: ast.Lt}


def _mirror(tree: ast.AST) -> None:
    _swap_minmax(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            node.ops = [_MIRROR.get(type(op), type(op))() for op in node.ops]


def _inject_bug(family: str, function: ast.FunctionDef) -> ast.FunctionDef:
    """A copy of the correct function with the family's bug (templates.py's table)."""
    buggy = copy.deepcopy(function)
    if family == "minmax":
        _swap_minmax(buggy)
    elif family == "range":
        call = next(n for n in ast.walk(buggy) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "range")
        end = 0 if len(call.args) == 1 else 1
        arg = call.args[end]
        plus_one = (isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add)
                    and isinstance(arg.right, ast.Constant) and arg.right.value == 1)
        call.args[end] = arg.left if plus_one else ast.BinOp(arg, ast.Sub(), ast.Constant(1))
    elif family == "compare":
        compares = [n for n in ast.walk(buggy) if isinstance(n, ast.Compare)]
        if any(type(op) in _STRICT for c in compares for op in c.ops):
            for node in compares:
                node.ops = [_STRICT.get(type(op), type(op))() for op in node.ops]
        else:  # strict already: the bound moves by one (`A > B` -> `A > B + 1`)
            for node in compares:
                shift = ast.Add() if isinstance(node.ops[0], ast.Gt) else ast.Sub()
                node.comparators[0] = ast.BinOp(node.comparators[0], shift, ast.Constant(1))
    elif family == "zero":
        buggy.body = buggy.body[1:]  # the guard (zero bodies get no docstring: `_build`)
    else:  # init: the first accumulator line
        first = next(n for n in buggy.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                     and n.value.value in (0, 1))
        first.value = ast.Constant(1 - first.value.value)
    return buggy


def _source(function: ast.FunctionDef) -> str:
    return ast.unparse(ast.fix_missing_locations(ast.Module([function], []))) + "\n"


def _template_forms(template: Template) -> set[str]:
    """The body forms a template gives, one per TERM choice (mirrors and names: the same form)."""
    terms = [ast.parse(term, mode="eval").body for term in template.terms] or [None]
    return {body_form([_Fill({}, {"K": 2, "J": 3}, term).visit(statement) for statement in ast.parse(template.body).body])
            for term in terms}


# every held-out template's forms, the `shapes` split's and the `shapes_val` split's
RESERVED_FORMS = frozenset().union(*(_template_forms(t) for t in HELD_OUT_TEMPLATES))


def _build(template: Template, rng: random.Random, reshape_share: float = 0.0):
    """(fn_name, correct source, buggy source, kinds of the parameters, number with a default, constants,
    whether the body was reshaped into a reserved template's form)."""
    used = [p for p in _PLACEHOLDERS if re.search(rf"\b{p}\b", template.body)]
    names = dict(zip(used, rng.sample(NAMES, len(used))))
    constants = dict(zip(("K", "J"), sorted(rng.sample(CONSTANTS, 2))))
    term = ast.parse(rng.choice(template.terms), mode="eval").body if template.terms else None
    body = [_Fill(names, constants, term).visit(statement) for statement in ast.parse(template.body).body]
    reserved_form = False
    if reshape_share > 0 and rng.random() < reshape_share:
        fresh = [name for name in NAMES if name not in names.values()]
        int_params = [names[p] for p, kind in template.params if kind in INT_KINDS and p != template.divisor]
        body = reshape(body, rng.sample(fresh, 2), rng, int_params, tuple(constants.values()))
        reserved_form = body_form(body) in RESERVED_FORMS
    kinds = [kind for _, kind in template.params]
    params = [names[placeholder] for placeholder, _ in template.params]
    defaults = []
    if kinds[-1] in INT_KINDS and rng.random() < 0.25:
        value = KINDS[kinds[-1]][0](rng)
        while str(abs(value)) in _HELDOUT_ONLY_NUMBERS:
            value = KINDS[kinds[-1]][0](rng)
        defaults = [ast.Constant(value)]
    if template.divisor:  # no docstring: the fix puts its guard under the def line, and the oracle's Edit
        # would then copy the docstring line, which the compact front-end's words do not carry
        body.insert(0, ast.parse(f"if {names[template.divisor]} == 0:\n    return 0").body[0])
    elif rng.random() < 0.25:
        body.insert(0, ast.Expr(ast.Constant(rng.choice(DOCSTRINGS))))
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], vararg=None, kwonlyargs=[],
                              kw_defaults=[], kwarg=None, defaults=defaults)
    fn_name = rng.choice(RENAME_POOL)
    function = ast.FunctionDef(fn_name, arguments, body, decorator_list=[], returns=None)
    if template.mirror and rng.random() < 0.5:
        _mirror(function)
    buggy = _inject_bug(template.family, function)
    return fn_name, _source(function), _source(buggy), kinds, len(defaults), tuple(constants.values()), reserved_form


# ---------------------------------------------------------------- drawing and checking

@cache
def _shapes_bodies() -> tuple[tuple[Counter, Counter], ...]:
    """Each distinct `shapes` and `shapes_val` task body's blanked lines, buggy and fixed, as multisets."""
    bodies = {}
    for task in make_tasks("shapes") + make_tasks("shapes_val"):
        pair = tuple(Counter(body_line_shapes(task, source))
                     for source in (task.source, ops.apply_op(task, task.source, task.fix_op)))
        bodies[tuple(frozenset(lines.items()) for lines in pair)] = pair
    return tuple(bodies.values())


def _holds_a_shapes_body(task: Task, fixed: str) -> bool:
    """Whether the task's body, buggy or fixed, holds every line of some `shapes` or `shapes_val` body
    (as multisets)."""
    buggy, fixed_lines = Counter(body_line_shapes(task)), Counter(body_line_shapes(task, fixed))
    return any(not (shapes_buggy - buggy) or not (shapes_fixed - fixed_lines)  # Counter '-' keeps counts > 0 only
               for shapes_buggy, shapes_fixed in _shapes_bodies())


def _draw(template: Template, rng: random.Random, split: str, reshape_share: float = 0.0) -> Task | None:
    """One candidate from `template`, or None when it breaks a rule of the module doc before the checks."""
    fn_name, correct, buggy, kinds, n_default, constants, reserved_form = _build(template, rng, reshape_share)
    if reserved_form:
        return None
    tests = choose_tests(rng, template.family, fn_name, correct, buggy,
                         draw_inputs(rng, kinds, constants, n_default), len(kinds))
    if tests is None or buggy in _BOOK_SOURCES:
        return None
    digest = hashlib.sha256(repr((buggy, tests)).encode()).hexdigest()[:8]
    task = Task(f"{template.id}-{digest}", fn_name, buggy, tests[0], tests[1], split)
    fixed = ops.apply_op(task, buggy, task.fix_op) or ""
    operands, shapes = set(operand_names(task)), unseen_heldout_line_shapes()
    if any(_blanked(line, operands) in shapes for text in (buggy, fixed) for line in text.splitlines() if line.strip()):
        return None
    if template.id.endswith("/grammar") and _holds_a_shapes_body(task, fixed):
        return None
    return task


def _generate(plan: list[tuple[Template, ...]], rng: random.Random, split: str, sandbox,
              reshape_share: float = 0.0, grammar_share: float = 0.0, flat_pairs: bool = False,
              keep=None, taken: frozenset[str] = frozenset(), compare_pairs: bool = False) -> list[Task]:
    """One checked task per entry of `plan` (the templates it may be drawn from; with probability
    `grammar_share` a grammar body form of their family instead). In rounds: each empty
    entry draws until a candidate passes `_draw`, is new (not in `taken` either) and, given `keep`,
    keep(task) holds; the round's candidates are checked in one batch (task_checks.task_problems); an
    entry whose candidate fails draws again in the next round."""
    if sandbox is None:
        with Sandbox(SandboxConfig()) as own:
            return _generate(plan, rng, split, own, reshape_share, grammar_share, flat_pairs, keep, taken,
                             compare_pairs)
    tasks: list[Task | None] = [None] * len(plan)
    sources: set[str] = set(taken)
    draws, last_problem = [0] * len(plan), [""] * len(plan)
    while None in tasks:
        batch = {}
        for index, choices in enumerate(plan):
            while tasks[index] is None and index not in batch:
                draws[index] += 1
                if draws[index] > MAX_DRAWS:  # a template none of whose draws is sound (an env change?)
                    also = f" or the {choices[0].family} grammar" if grammar_share > 0 else ""
                    raise RuntimeError(f"no sound task from {[t.id for t in choices]}{also} in {MAX_DRAWS} draws; "
                                       f"last problem: {last_problem[index] or 'none passed _draw (and keep)'}")
                grammar = grammar_share > 0 and rng.random() < grammar_share  # no draw at 0: pools as before
                template = (grammar_template(choices[0].family, rng, flat_pairs, compare_pairs) if grammar
                            else rng.choice(choices))
                task = _draw(template, rng, split, reshape_share)
                if task is not None and task.source not in sources and (keep is None or keep(task)):
                    batch[index] = task
                    sources.add(task.source)
        for (index, task), problem in zip(batch.items(), task_problems(list(batch.values()), sandbox)):
            tasks[index], last_problem[index] = (task, "") if problem is None else (None, problem)
    return tasks


def generated_tasks(n: int, seed: int = 0, sandbox=None, reshape: float = 0.0, grammar: float = 0.0,
                    flat_pairs: bool = False, two_line_minmax: float = 0.0,
                    two_line_compare: float = 0.0) -> list[Task]:
    """n distinct checked tasks from training templates, families in turn, a `reshape` share of them with
    helper locals, a `grammar` share from fresh body forms (module doc; flat_pairs: gym/grammar.py's), a
    `two_line_minmax` share of the minmax ones and a `two_line_compare` share of the compare ones then
    replaced by tasks whose fix spans two lines."""
    if sandbox is None and (two_line_minmax > 0 or two_line_compare > 0):
        with Sandbox(SandboxConfig()) as own:
            return generated_tasks(n, seed, own, reshape, grammar, flat_pairs, two_line_minmax, two_line_compare)
    by_family = [tuple(t for t in TRAINING_TEMPLATES if t.family == family) for family in FAMILIES]
    tasks = _generate([by_family[i % len(FAMILIES)] for i in range(n)], random.Random(seed), "train", sandbox,
                      reshape, grammar, flat_pairs)
    for family, share in (("minmax", two_line_minmax), ("compare", two_line_compare)):
        if share > 0:
            tasks = _with_two_line(tasks, family, share, seed, sandbox, reshape)
    return tasks


def fix_spans_two_lines(task: Task) -> bool:
    """Whether the fix spans two lines: the oracle's Edit of `task` (the fix op's change as whole lines,
    widened as the oracle widens a line that is not unique) replaces two lines."""
    fixed = ops.apply_op(task, task.source, task.fix_op)
    return fixed is not None and line_edit(task.source, fixed)[0].count("\n") == 1


def fix_needs_both_lines(task: Task) -> bool:
    """Whether the fix spans two lines that each matter: the oracle's Edit replaces two lines, and the fixed
    source with either changed line left as it was fails a hidden test, so fixing one of the oracle's two
    lines alone does not earn the reward (rewriting a third line might). The task's code runs in-process
    with no time limit (ops.passes_hidden): only for bodies whose loops end however they are edited."""
    fixed = ops.apply_op(task, task.source, task.fix_op)
    if fixed is None or not fix_spans_two_lines(task):
        return False
    buggy_lines, fixed_lines = task.source.split("\n"), fixed.split("\n")
    changed = [i for i, (buggy, right) in enumerate(zip(buggy_lines, fixed_lines)) if buggy != right]
    if len(buggy_lines) != len(fixed_lines) or len(changed) != 2:
        return False
    partial_fixes = ("\n".join(buggy_lines[i] if j == i else line for j, line in enumerate(fixed_lines))
                     for i in changed)
    return not any(ops.passes_hidden(task, partial) for partial in partial_fixes)


def _with_two_line(tasks: list[Task], family: str, share: float, seed: int, sandbox,
                   reshape_share: float) -> list[Task]:
    """`tasks` with `share` of its `family` tasks (minmax or compare) replaced by grammar tasks of the family
    whose fix spans two lines (minmax: flat pairs, kept as first written: about a fifth of them pass the
    hidden tests with one of the two lines fixed; compare: its paired forms, each line needed:
    fix_needs_both_lines). Which tasks and their replacements come from a stream of their own (seeded by
    `family` and `seed`), so the pool's other tasks, and its draw, are those without the replacement."""
    rng = random.Random(f"two-line {family} {seed}")
    of_family = [index for index, task in enumerate(tasks) if task.family == family]
    replaced = sorted(rng.sample(of_family, round(share * len(of_family))))
    templates = tuple(t for t in TRAINING_TEMPLATES if t.family == family)
    fresh = _generate([templates] * len(replaced), rng, "train", sandbox, reshape_share, 1.0, family == "minmax",
                      keep=fix_needs_both_lines if family == "compare" else fix_spans_two_lines,
                      taken=frozenset(task.source for task in tasks),
                      compare_pairs=family == "compare")
    out = list(tasks)
    for index, task in zip(replaced, fresh):
        out[index] = task
    return out


def training_pool(env_cfg=None, sandbox=None) -> list[Task]:
    """The book's training tasks, then env_cfg.generated_tasks generated ones (None or 0: the book's only).
    Generation checks each candidate on `sandbox` (None: one opened for the call); it says on stderr
    when it starts and how long it took (200 tasks: about 1 s on a 2-core Xeon)."""
    tasks = make_tasks("train")
    if env_cfg is None or env_cfg.generated_tasks <= 0:
        return tasks
    n, seed, started = env_cfg.generated_tasks, env_cfg.generated_seed, time.perf_counter()
    print(f"generating {n} training tasks (env.generated_tasks, seed {seed})", file=sys.stderr, flush=True)
    generated = generated_tasks(n, seed, sandbox, env_cfg.generated_reshape, env_cfg.generated_grammar,
                                env_cfg.generated_grammar_flat_pairs, env_cfg.generated_two_line_minmax,
                                env_cfg.generated_two_line_compare)
    held_out = {template.id for template in HELD_OUT_TEMPLATES}
    leaked = sorted({template_id(task) for task in generated} & held_out)
    assert not leaked, f"generated training tasks from the shapes splits' templates: {leaked}"
    print(f"generated {n} training tasks in {time.perf_counter() - started:.1f} s; with the book's {len(tasks)}, "
          f"groups draw from {n + len(tasks)}", file=sys.stderr)
    return tasks + generated


def shapes_tasks(seed: int = SHAPES_SEED, per_family: int = 10, sandbox=None, split: str = "shapes") -> list[Task]:
    """The `shapes` split afresh (or, with split='shapes_val', the `shapes_val` one): per family,
    `per_family` tasks from the split's reserved templates in turn."""
    plan = []
    for family in FAMILIES:
        reserved = [t for t in SPLIT_TEMPLATES[split] if t.family == family]
        plan += [(reserved[i % len(reserved)],) for i in range(per_family)]
    return _generate(plan, random.Random(seed), split, sandbox)


SPLIT_MODULES = {"shapes": ("shapes_split.py", "SHAPES"), "shapes_val": ("shapes_val_split.py", "SHAPES_VAL")}


def shapes_module_text(tasks: list[Task], split: str = "shapes") -> str:
    """The text of the module that stores `split` (gym/shapes_split.py or gym/shapes_val_split.py)."""
    rows = tuple((t.name, t.source, t.public_tests, t.hidden_tests) for t in tasks)
    which = "reserved" if split == "shapes" else "reserved validation"
    return (f'"""The `{split}` split: {len(tasks)} tasks from the task generator\'s {which} templates (seed '
            f"{SHAPES_SEED}).\n\nWritten by `python -m bugfix_rl.gym.generator`; do not edit: "
            "tests/test_generator.py checks that it is\nwhat `generator.shapes_tasks("
            + ("" if split == "shapes" else f'split="{split}"') + ")` gives. "
            f'gym/tasks.py serves it as `make_tasks("{split}")`.\n"""\n\n'
            "# (name, buggy source, public tests, hidden tests)\n"
            f"{SPLIT_MODULES[split][1]} = {pprint.pformat(rows, width=110)}\n")


if __name__ == "__main__":
    from pathlib import Path

    for split, (file_name, _) in SPLIT_MODULES.items():
        path = Path(__file__).with_name(file_name)
        path.write_text(shapes_module_text(shapes_tasks(split=split), split))
        print(f"wrote {path}")
