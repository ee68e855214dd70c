"""A generated task's tests, chosen by differential testing (gym/generator.py draws the task).

API:

    KINDS: argument kind -> (a draw from an rng, edge values the tests should see)
    draw_inputs(rng, kinds, constants, n_default) -> list[tuple]
        About CANDIDATE_INPUTS distinct argument tuples, edge-heavy (ties between arguments, edge values,
        the template's constants); with a default argument some leave it out.
    choose_tests(rng, family, fn_name, correct, buggy, inputs, arity) -> (public, hidden) | None
        Expected values are the correct function's (trusted code, run in-process as the edit menu runs
        it). PUBLIC_TESTS public tests, at least one failing on the bug; HIDDEN_TESTS hidden tests on other
        inputs, at least one failing on the bug, one on which each other op that applies fails, and, with
        a default argument, calls that omit it. None when the inputs cannot make a sound task.
"""

from __future__ import annotations

import copy
import random

from bugfix_rl.gym import ops
from bugfix_rl.gym.tasks import FAMILY_OP, FIX_OPS
from bugfix_rl.gym.templates import INT_KINDS

PUBLIC_TESTS, HIDDEN_TESTS, CANDIDATE_INPUTS = 3, 6, 60

KINDS = {  # argument kinds: a draw, and edge values the tests should see
    "int": (lambda rng: rng.randint(-4, 12), (0, 1)),
    "nat": (lambda rng: rng.randint(0, 9), (0, 1)),
    "small": (lambda rng: rng.randint(0, 7), (0, 1)),
    "list": (lambda rng: [rng.randint(-3, 9) for _ in range(rng.randint(0, 4))], ([], [0])),
    "nelist": (lambda rng: [rng.randint(-3, 9) for _ in range(rng.randint(1, 4))], ([0], [5, 5])),
}


def draw_inputs(rng: random.Random, kinds: list[str], constants: tuple[int, ...], n_default: int) -> list[tuple]:
    """Distinct argument tuples, edge-heavy; with a default argument some leave it out."""
    ints = [i for i, kind in enumerate(kinds) if kind in INT_KINDS]
    seen, inputs = set(), []
    for _ in range(CANDIDATE_INPUTS):
        args = [KINDS[kind][0](rng) for kind in kinds]
        roll = rng.random()
        if roll < 0.35 and len(ints) >= 2:  # a tie, up to a constant or a third argument
            i, j, *k = rng.sample(ints, min(3, len(ints)))
            args[j] = args[i] + (args[k[0]] if k and rng.random() < 0.3 else rng.choice((0, 0, 1) + constants) *
                                 rng.choice((1, -1)))
            args[j] = args[j] if kinds[j] == "int" else max(0, args[j])  # a loop counts nat and small down
        elif roll < 0.5:
            i = rng.randrange(len(kinds))
            args[i] = copy.deepcopy(rng.choice(KINDS[kinds[i]][1]))
        elif roll < 0.7 and ints:
            args[rng.choice(ints)] = rng.choice(constants) + rng.choice((-1, 0, 0, 1))  # >= 1: CONSTANTS >= 2
        if n_default and rng.random() < 0.3:
            args = args[:-n_default]
        if repr(args) not in seen:
            seen.add(repr(args))
            inputs.append(tuple(args))
    return inputs


def _outputs(source: str, fn_name: str, inputs: list[tuple]) -> list:
    return ops.run_cases(source, fn_name, tuple((args, None) for args in inputs))


def _differs(output, expected) -> bool:
    return output is ops._ERROR or type(output) is not type(expected) or output != expected


def choose_tests(rng: random.Random, family: str, fn_name: str, correct: str, buggy: str, inputs: list[tuple],
                  arity: int):
    """(public, hidden) cases, or None when the inputs cannot make a sound task (module doc)."""
    expected = _outputs(correct, fn_name, inputs)
    cases = [(args, out) for args, out in zip(inputs, expected) if out is not ops._ERROR]
    if len({repr(out) for _, out in cases}) < 2:
        return None  # a constant function
    inputs = [args for args, _ in cases]
    wrong = [_outputs(buggy, fn_name, inputs)]  # the bug's outputs, then each other op's that applies
    for op in FIX_OPS:
        edited = getattr(ops, op)(buggy)
        if op != FAMILY_OP[family] and edited is not None:
            wrong.append(_outputs(edited, fn_name, inputs))
    fails = [[_differs(out, want) for out, (_, want) in zip(outputs, cases)] for outputs in wrong]
    full = [i for i, (args, _) in enumerate(cases) if len(args) == arity]
    bug_full = [i for i in full if fails[0][i]]
    if len(bug_full) < 1 or len(full) < PUBLIC_TESTS:
        return None
    n_failing = min(rng.choice((1, 1, 2)), len(bug_full))
    public = rng.sample(bug_full, n_failing)
    passing = [i for i in full if not fails[0][i]]
    public += rng.sample(passing, min(PUBLIC_TESTS - n_failing, len(passing)))
    public += rng.sample([i for i in full if i not in public], PUBLIC_TESTS - len(public))
    rest = [i for i in range(len(cases)) if i not in public]
    hidden = []
    for failing in fails:  # the bug, then each other op that applies: a hidden case it fails
        witnesses = [i for i in rest if failing[i]]
        if not witnesses:
            return None
        if not any(i in hidden for i in witnesses):
            hidden.append(rng.choice(witnesses))
    if len(hidden) > HIDDEN_TESTS:
        return None
    shorter = [i for i in rest if len(cases[i][0]) < arity and i not in hidden]
    if shorter:
        hidden.append(rng.choice(shorter))
    others = [i for i in rest if i not in hidden]
    hidden += rng.sample(others, min(HIDDEN_TESTS - len(hidden), len(others)))
    rng.shuffle(hidden)
    return tuple(cases[i] for i in public), tuple(cases[i] for i in hidden)
