"""Body forms drawn from a small grammar, one family at a time: templates that no list holds.

    grammar_template(family, rng, flat_pairs=False, compare_pairs=False) -> Template

gym/templates.py lists 55 body forms by hand (40 for training). A tiny agent trained on 40 forms
learns those forms, not the fix (docs/TOOLS.md): a pool of 50 taught it nothing about the 5 it left
out. This module composes a fresh body form on every call from a family's pieces, so a training pool of
200 draws holds about as many forms:

- minmax: min/max calls nested in arithmetic over two or three integers, over a list (`min(A)`,
  `A[0]`, `len(A)`) or in a loop that keeps the best or adds capped items; returned directly, through
  one or two helper locals, or under a truthy flag (`if C:` / a conditional expression);
- range: one `range` call (one to three arguments, an end with `+ 1` or without, an end that may be a
  helper local) in a `for` loop that adds, multiplies or counts (filtered by `I % K` or not), in
  `sum(...)`, a generator or list comprehension, or `len(list(...))`;
- compare: comparisons of integers or arithmetic over them (all inclusive or all strict in one body,
  as the family's fix needs), returned, joined by `and` or `or`, under `if`, in a conditional expression,
  through a helper, or filtering a list in a loop or comprehension;
- zero: a floor division by the divisor parameter in an expression that may add a remainder by it, a
  constant or another parameter (`A + K // B` divides K only: the first `//` is still by the divisor);
  directly, through helpers, under a truthy flag, or after or inside a loop over a list;
- init: one or two accumulators (0 for a sum, 1 for a product) over a list (`for`) or a countdown
  (`while A != 0`), optionally filtered (`if I % K == 0:`), returned plain or combined.

The families' rules of gym/templates.py hold for every draw (only minmax calls min/max, only range
calls range, only zero divides, only compare compares with `<`/`>`, every loop ends under every op);
the generator's checks decide whether a drawn task is sound, as for any template. A draw whose body
holds every line of a `shapes` or `shapes_val` task's body (gym/generator.py) is dropped, so the grammar
never hands training a reserved template's line combination; single lines of one may occur, as in any
Python.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from bugfix_rl.gym.templates import Template

_OPS = ("+", "-", "*")


class _Draw:
    """One body's draw: its random source, the parameters it has asked for (placeholder -> kind),
    whether minmax's two-line forms are drawn more often, with flat calls, and whether compare draws only
    its forms with two comparisons on adjacent lines (`grammar_template`)."""

    def __init__(self, rng: random.Random, flat_pairs: bool = False, compare_pairs: bool = False):
        self.rng, self.params, self.flat_pairs, self.compare_pairs = rng, {}, flat_pairs, compare_pairs

    def param(self, name: str, kind: str) -> str:
        self.params.setdefault(name, kind)
        return name

    def pick(self, *choices):
        return self.rng.choice(choices)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def template(self, family: str, body: str, divisor: str = "") -> Template:
        """The drawn body as a template; parameters the body came not to use are left out."""
        used = [p for p in (("A", "C", "B") if divisor else ("A", "B", "C"))
                if p in self.params and re.search(rf"\b{p}\b", body)]
        params = tuple((p, self.params[p]) for p in used)
        return Template(f"{family}/grammar", params, body, divisor=divisor)


def _indent(lines: list[str], depth: int = 1) -> list[str]:
    return ["    " * depth + line for line in lines]


def _ints(draw: _Draw, kind: str, most: int) -> list[str]:
    return [draw.param(p, kind) for p in ("A", "B", "C")[: draw.rng.randint(1, most)]]


# ---------------------------------------------------------------- minmax

def _minmax_call(draw: _Draw, atoms: list[str], depth: int) -> str:
    args = []
    for _ in range(draw.pick(2, 2, 2, 3)):
        roll = draw.rng.random()
        if depth > 0 and roll < 0.3:
            args.append(_minmax_call(draw, atoms, depth - 1))
        elif roll < 0.55 and len(atoms) > 1:
            a, b = draw.rng.sample(atoms, 2)
            args.append(f"{a} {draw.pick(*_OPS)} {b}")
        elif roll < 0.7:
            args.append(f"{draw.pick(*atoms)} {draw.pick('+', '*')} K")
        else:
            args.append(draw.pick(*atoms))
    if len(set(args)) < len(args):
        args = list(dict.fromkeys(args)) + ["J"]
    return f"{draw.pick('min', 'max')}({', '.join(args)})"


def _flat_call(draw: _Draw, atoms: list[str]) -> str:
    """min or max of a parameter (or helper) and another atom or constant, the first maybe `X + K` or
    `X * K`: at most 8 words, so that two lines of them fit one Edit of TinyAgent's turn."""
    first = draw.pick(*[atom for atom in atoms if atom not in ("K", "J")])
    second = draw.pick(*[atom for atom in dict.fromkeys(atoms + ["K", "J"]) if atom != first])
    if draw.chance(0.3):
        first = f"{first} {draw.pick('+', '*')} K"
    return f"{draw.pick('min', 'max')}({first}, {second})"


def _minmax(draw: _Draw) -> str:
    shape = draw.pick("ints", "ints", "list", "loop")
    if shape == "loop":
        bound = draw.pick("K", "B")
        bound = draw.param("B", "int") if bound == "B" else bound
        if draw.chance(0.5):
            draw.param("A", "nelist")
            step = f"P = {draw.pick('min', 'max')}(P, {draw.pick('I', 'I + K', 'I * K', f'I - {bound}')})"
            lines = ["P = A[0]", "for I in A:", *_indent([step])]
        else:
            draw.param("A", "list")
            add = f"P {draw.pick('+=', '-=')} {draw.pick('min', 'max')}(I, {bound})"
            lines = ["P = 0", "for I in A:", *_indent([add])]
        return "\n".join(lines + [draw.pick("return P", "return P * K", f"return P + {bound}")])
    if shape == "list":
        draw.param("A", "nelist")
        atoms = ["A[0]", "A[-1]", "len(A)", "sum(A)", "min(A)", "max(A)"]
        if draw.chance(0.4):
            atoms.append(draw.param("B", "int"))
        first = _minmax_call(draw, atoms, 0) if draw.chance(0.5) else f"{draw.pick('min', 'max')}(A)"
        second = f"{draw.pick('min', 'max')}(A)"
        if draw.chance(0.5):
            return f"return {first} {draw.pick(*_OPS)} {second}"
        return f"P = {first}\nQ = {second}\nreturn {draw.pick('P - Q', 'Q - P', 'P + Q', 'P * K + Q')}"
    atoms = _ints(draw, "int", 3)
    if len(atoms) == 1:
        atoms.append("K")
    if draw.chance(0.3):  # a helper local from the parameters, used like one
        helper = f"R = {draw.pick(*atoms)} {draw.pick(*_OPS)} {draw.pick('K', 'J')}"
        atoms, prelude = atoms + ["R"], [helper]
    else:
        prelude = []
    if draw.flat_pairs:  # the forms whose fix may span two lines drawn twice as often
        form = draw.pick("return", "helper", "two_helpers", "two_helpers", "flag", "flag")
    else:
        form = draw.pick("return", "return", "helper", "two_helpers", "flag")
    flat = draw.flat_pairs and form in ("two_helpers", "flag")

    def second_call(extra: list[str]) -> str:
        """The body's other min/max call, over the atoms and `extra`: flat, or unnested."""
        return _flat_call(draw, atoms + extra) if flat else _minmax_call(draw, atoms + extra, 0)
    call = _flat_call(draw, atoms) if flat else _minmax_call(draw, atoms, 1)
    if form == "return":
        tail = f" {draw.pick(*_OPS)} {draw.pick(*atoms)}" if draw.chance(0.3) else ""
        body = [f"return {call}{tail}"]
    elif form == "helper":
        body = [f"P = {call}", f"return P {draw.pick(*_OPS)} {draw.pick('K', *atoms)}"]
    elif form == "two_helpers":
        second = second_call(["P"])
        body = [f"P = {call}", f"Q = {second}", f"return {draw.pick('P - Q', 'Q - P', 'P + Q', 'Q')}"]
    else:
        flag = draw.param("C", "nat") if "C" not in atoms else draw.param("B", "nat") if "B" not in atoms else None
        if flag is None:
            body = [f"return {call}"]
        elif draw.chance(0.5):
            body = [f"if {flag}:", *_indent([f"return {call}"]), f"return {second_call([])}"]
        else:
            body = [f"return {call} if {flag} else {second_call([])}"]
    return "\n".join(prelude + body)


# ---------------------------------------------------------------- range

def _range(draw: _Draw) -> str:
    end = draw.param("A", "small")
    prelude = []
    roll = draw.rng.random()
    if roll < 0.25:
        prelude, end = [f"Q = {end} {draw.pick('*', '+')} {draw.pick('K', 'J')}"], "Q"
    elif roll < 0.4:
        end = f"{end} + {draw.param('B', 'small')}"
    end = f"{end} + 1" if draw.chance(0.7) else end
    start = draw.pick(None, "0", "1", "1", "2", "K", "C")
    start = draw.param("C", "small") if start == "C" else start
    step = ", K" if start is not None and draw.chance(0.2) else ""
    call = f"range({end})" if start is None else f"range({start}, {end}{step})"
    term = draw.pick("I", "I", "I * I", "I * K", "I + K", "2 * I + 1")
    form = draw.pick("loop", "loop", "loop", "sum", "generator", "comprehension", "list")
    if form == "loop":
        kind = draw.pick("sum", "sum", "product", "count")
        init, update = {"sum": ("0", f"P += {term}"), "product": ("1", f"P *= {draw.pick('I', 'I + 1', 'I + K')}"),
                        "count": ("0", "P += 1")}[kind]
        inner = [update]
        if draw.chance(0.3):
            inner = [f"if I % K{draw.pick('', ' == 0')}:", *_indent(inner)]
        result = draw.pick("return P", "return P", "return P * K", "return P + K", "return P - A")
        body = [f"P = {init}", f"for I in {call}:", *_indent(inner), result]
    elif form == "sum":
        body = [f"return sum({call})"] if draw.chance(0.5) else \
            [f"P = sum({call})", draw.pick("return P * K", "return P + K", "return P - K")]
    elif form == "generator":
        body = [f"return sum({term} for I in {call})"]
    elif form == "comprehension":
        kept = draw.pick("", " if I % K")
        body = [f"P = [{term} for I in {call}{kept}]", draw.pick("return len(P)", "return sum(P)")]
    else:
        body = [f"return len(list({call}))"]
    return "\n".join(prelude + body)


# ---------------------------------------------------------------- compare

def _compare(draw: _Draw) -> str:
    inclusive = draw.chance(0.6)  # one class per body: the family's fix makes every strict one inclusive

    def op() -> str:
        return draw.pick(">=", "<=") if inclusive else draw.pick(">", "<")
    if draw.compare_pairs:
        return _compare_pair(draw, op)
    if draw.chance(0.3):  # a list filtered by a comparison with a parameter or a constant
        draw.param("A", "list")
        bound = draw.param("B", "int") if draw.chance(0.7) else "K"
        test = f"I {op()} {bound}" if draw.chance(0.7) else f"I + K {op()} {bound}"
        form = draw.pick("count", "total", "length", "sum")
        if form in ("count", "total"):
            add = "P += 1" if form == "count" else "P += I"
            return "\n".join(["P = 0", "for I in A:", *_indent([f"if {test}:", *_indent([add])]), "return P"])
        if form == "length":
            return f"return len([I for I in A if {test}])"
        return f"return sum(I for I in A if {test})"
    atoms = _ints(draw, "int", 3)

    def side(avoid: str = "") -> str:
        a = draw.pick(*[atom for atom in atoms if atom != avoid] or ["K"])
        roll = draw.rng.random()
        if roll < 0.5:
            return a
        if roll < 0.75:
            return f"{a} {draw.pick('+', '*')} K"
        b = draw.pick(*atoms)
        return f"{a} {draw.pick('+', '-')} {b}" if b != a else f"{a} - K"

    def comparison() -> str:
        left = side()
        right = side(avoid=left.split()[0])
        return f"{left} {op()} {right}"
    prelude = []
    if len(atoms) >= 2 and draw.chance(0.3):
        a, b = draw.rng.sample(atoms, 2)
        prelude, atoms = [f"P = {a} {draw.pick(*_OPS)} {b}"], atoms + ["P"]
    form = draw.pick("return", "return", "and", "if", "ternary", "flag_helper")

    def value() -> str:
        return draw.pick("K", "J", *atoms)

    if form == "return":
        body = [f"return {comparison()}"]
    elif form == "and":
        body = [f"return {comparison()} {draw.pick('and', 'or')} {comparison()}"]
    elif form == "if":
        yes, no = draw.pick(("True", "False"), ("K", "J"), (value(), value()))  # both value()s draw, whichever
        body = [f"if {comparison()}:", *_indent([f"return {yes}"]), f"return {no}"]
    elif form == "ternary":
        body = [f"return {value()} if {comparison()} else {value()}"]
    else:
        body = [f"Q = {comparison()}", f"return {draw.pick('Q', 'not Q')}"]
    return "\n".join(prelude + body)


def _compare_pair(draw: _Draw, op: Callable[[], str]) -> str:
    """Two comparisons on adjacent lines, so that the family's fix spans two lines: a list filtered by two
    nested `if`s, two helpers joined, two nested `if`s, or a helper and an `if`. Short sides (a parameter,
    maybe `+ K`, against another or a constant), so that both lines fit one Edit of TinyAgent's turn. Many
    draws need only one of the two lines fixed (one comparison implies the other, or the tests miss one);
    the generator keeps those that need both (generator.fix_needs_both_lines)."""
    if draw.chance(0.3):
        draw.param("A", "list")
        first_bound = draw.param("B", "int")
        second_bound = draw.param("C", "int") if draw.chance(0.5) else "K"
        inner = [f"if I {op()} {second_bound}:", *_indent([draw.pick("P += 1", "P += I")])]
        outer = [f"if I {op()} {first_bound}:", *_indent(inner)]
        return "\n".join(["P = 0", "for I in A:", *_indent(outer), "return P"])
    atoms = _ints(draw, "int", 3)

    def comparison() -> str:
        left = draw.pick(*atoms)
        right = draw.pick(*[atom for atom in atoms if atom != left], "K")
        return f"{left} + K {op()} {right}" if draw.chance(0.25) else f"{left} {op()} {right}"
    first, second = comparison(), comparison()
    form = draw.pick("helpers", "nested_if", "helper_if")
    if form == "helpers":
        joined = f"P {draw.pick('and', 'or')} {draw.pick('Q', 'not Q')}"
        return "\n".join([f"P = {first}", f"Q = {second}", f"return {joined}"])
    if form == "nested_if":
        yes, no = draw.pick(("True", "False"), ("K", "J"))
        return "\n".join([f"if {first}:", *_indent([f"if {second}:", *_indent([f"return {yes}"])]), f"return {no}"])
    return "\n".join([f"P = {first}", f"if {second}:", *_indent(["return P"]), f"return {draw.pick('not P', 'K')}"])


# ---------------------------------------------------------------- zero

def _zero(draw: _Draw) -> str:
    divisor = draw.param("B", "nat")
    if draw.chance(0.3):  # a list, then a division
        draw.param("A", "list")
        form = draw.pick("after", "inside", "builtin", "items")
        if form == "after":
            step = draw.pick("P += I", "P += I * K", "P += 1")
            result = f"return P // {divisor}{draw.pick('', ' + K')}"
            return "\n".join(["P = 0", "for I in A:", *_indent([step]), result])
        if form == "inside":
            return "\n".join(["P = 0", "for I in A:", *_indent([f"P += I // {divisor}"]), "return P"])
        if form == "builtin":
            return f"return {draw.pick('sum(A)', 'len(A)')} // {divisor}"
        return f"P = [I // {divisor} for I in A]\nreturn sum(P)"
    draw.param("A", "int")
    numerator = draw.pick("A", "A", "A * K", "A + K", "(A + K)", "A - K")
    if draw.chance(0.3):
        numerator = f"(A {draw.pick('+', '-')} {draw.param('C', 'int')})"
    division = f"{numerator} // {divisor}"
    extra = draw.pick("", "", f" + K", f" * K", f" + {numerator} % {divisor}", f" - A % {divisor}")
    form = draw.pick("return", "return", "helper", "prelude", "flag", "ternary")
    if form == "return":
        return f"return {division}{extra}"
    if form == "helper":
        return f"P = {division}{extra}\nreturn {draw.pick('P + K', 'P * K', 'P - A', 'P')}"
    if form == "prelude":
        scaled, result = f"{numerator}{draw.pick(' * K', ' + K', '')}", f"Q{draw.pick(' + K', ' * J', '')}"
        return f"P = {scaled}\nQ = P // {divisor}\nreturn {result}"
    if form == "flag":
        return f"if A:\n    return {division}{extra}\nreturn {draw.pick('K', 'J', 'A')}"
    return f"return {division}{extra} if A else {draw.pick('K', 'J')}"


# ---------------------------------------------------------------- init

def _init(draw: _Draw) -> str:
    product = draw.chance(0.4)
    start = "1" if product else "0"
    two = draw.chance(0.3)
    if draw.chance(0.3):  # a countdown
        var = draw.param("A", "small")
        step = f"P *= {var}" if product else f"P += {draw.pick(var, f'{var} * K', f'{var} + K')}"
        inner = [step] + ([f"Q {'+=' if product else '*='} {var}"] if two else []) + [f"{var} = {var} - 1"]
        head = ["P = " + start] + ([f"Q = {'0' if product else '1'}"] if two else [])
        lines = head + [f"while {var} != 0:", *_indent(inner)]
    else:
        draw.param("A", "list")
        scale = draw.param("B", "int") if draw.chance(0.25) else "K"
        terms = ("I", "I + K", "I * K") if product else ("I", "I", "I * I", f"I * {scale}", "I + K")
        term = draw.pick(*terms)
        step = f"P {'*=' if product else '+='} {term}"
        inner = [step] + ([f"Q {'+=' if product else '*='} I"] if two else [])
        if draw.chance(0.3):
            inner = [f"if {draw.pick('I % K == 0', 'I % K', 'I')}:", *_indent(inner)]
        head = ["P = " + start] + ([f"Q = {'0' if product else '1'}"] if two else [])
        lines = head + ["for I in A:", *_indent(inner)]
    results = ["return P", "return P * K", "return P + K"]
    if two:
        results += ["return P + Q", "return P - Q", "return Q * K + P"]
    return "\n".join(lines + [draw.pick(*results)])


_FAMILIES = {"minmax": _minmax, "range": _range, "compare": _compare, "zero": _zero, "init": _init}


def grammar_template(family: str, rng: random.Random, flat_pairs: bool = False,
                     compare_pairs: bool = False) -> Template:
    """A fresh body form of `family` (module doc), as a template the generator fills and checks; drawn
    again when the body came to use no parameter (a constant function). flat_pairs: minmax's forms with
    two min/max lines (two helpers, a flag's `if`) are drawn twice as often, with flat calls
    (`_flat_call`): nested ones make the oracle's two-line Edit longer than TinyAgent's turn, and the
    generator drops such a task (without: 1 of the 40 minmax tasks of a 200-task pool has a two-line fix).
    compare_pairs: compare draws only its forms with two comparisons on adjacent lines (`_compare_pair`),
    which it has none of otherwise."""
    while True:
        draw = _Draw(rng, flat_pairs, compare_pairs)
        template = draw.template(family, _FAMILIES[family](draw), divisor="B" if family == "zero" else "")
        if template.params:
            return template
