"""Body forms beyond the templates': the same kind of function written with helper locals.

A generated task's correct body comes from one template (gym/templates.py); `reshape` rewrites it,
before the family's bug is injected, by one or two of these steps, so that training sees line
combinations no template spells out:

- hoist: a call or an arithmetic or comparison inside a statement becomes a local assigned just
  before that statement (`return max(a) - min(a)` -> `lo = min(a)` / `return max(a) - lo`);
- return through a local: `return X` -> `r = X` / `return r`;
- a derived input: an integer parameter is read through a local made from it at the top
  (`n = a * 3`, then `n` wherever `a` was: `for i in range(1, n + 1)`).

Each step keeps the body a function of its parameters that ends on every input: nothing is hoisted
out of a comprehension, a lambda, a conditional expression's branches, a boolean operator or a chained
comparison's later operands (those are evaluated lazily or in their own scope), and bodies with a
`while` loop are left as they are (the edit menu runs every op's version of a task in-process, and a
`while` counter read through a local could stop ending under one of them). The generator's checks
then decide, as for any draw, whether the reshaped task is sound.

`body_form` names a body's form (names and constants blanked), so that a reshaped training body equal
to a reserved template's form can be dropped: training must not see the `shapes` or `shapes_val`
splits' body forms.
"""

from __future__ import annotations

import ast
import copy
import random

STEPS = ("hoist", "return_local", "derived_input")
_LAZY = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_HOISTABLE = (ast.Call, ast.BinOp, ast.Compare)
_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
# statement type -> its expression that runs once each time the statement does (a hoist's root)
_ROOT_FIELD = {ast.Return: "value", ast.Assign: "value", ast.AugAssign: "value", ast.If: "test", ast.For: "iter"}
_BUILTINS = frozenset({"min", "max", "range", "sum", "len", "abs", "True", "False", "None"})


def _eager_parts(node: ast.expr) -> list[ast.expr]:
    """The subexpressions of `node` (itself included) that are evaluated whenever it is, in its scope."""
    if isinstance(node, _LAZY) or isinstance(node, ast.BoolOp):
        return [node]
    if isinstance(node, ast.IfExp):
        return [node, *_eager_parts(node.test)]
    if isinstance(node, ast.Compare) and len(node.ops) > 1:
        return [node, *_eager_parts(node.left), *_eager_parts(node.comparators[0])]
    parts = [node]
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.expr):
            parts += _eager_parts(child)
    return parts


def _blocks(statements: list[ast.stmt]):
    """(block, index, statement) for every statement, nested ones included (bodies of for and if)."""
    for index, statement in enumerate(statements):
        yield statements, index, statement
        for field in ("body", "orelse"):
            inner = getattr(statement, field, None)
            if isinstance(statement, (ast.For, ast.If)) and inner:
                yield from _blocks(inner)


def _hoist_sites(body: list[ast.stmt]) -> list[tuple[list, int, ast.AST, str, ast.expr]]:
    """(block, index, parent node, field, expression): expressions that may become a local assigned just
    before statement block[index]. A `return`'s whole value is the other step's; an assignment's whole
    value would only rename it."""
    sites = []
    for block, index, statement in _blocks(body):
        field = _ROOT_FIELD.get(type(statement))
        if field is None or getattr(statement, field) is None:
            continue
        root = getattr(statement, field)
        for part in _eager_parts(root):
            if part is root and not isinstance(statement, ast.If):
                continue
            if not isinstance(part, _HOISTABLE):
                continue
            for parent in [statement, *ast.walk(root)]:
                for name, value in ast.iter_fields(parent):
                    if value is part:
                        sites.append((block, index, parent, name, part))
                    elif isinstance(value, list) and any(item is part for item in value):
                        sites.append((block, index, parent, name, part))
    return sites


def _replace(parent: ast.AST, field: str, old: ast.expr, new: ast.expr) -> None:
    value = getattr(parent, field)
    if isinstance(value, list):
        value[[i for i, item in enumerate(value) if item is old][0]] = new
    else:
        setattr(parent, field, new)


def _hoist(body: list[ast.stmt], local: str, rng: random.Random, **_) -> bool:
    sites = _hoist_sites(body)
    if not sites:
        return False
    block, index, parent, field, part = rng.choice(sites)
    _replace(parent, field, part, ast.Name(local, ast.Load()))
    block.insert(index, ast.Assign([ast.Name(local, ast.Store())], part))
    return True


def _return_local(body: list[ast.stmt], local: str, rng: random.Random, **_) -> bool:
    returns = [(block, index, s) for block, index, s in _blocks(body)
               if isinstance(s, ast.Return) and s.value is not None and not isinstance(s.value, (ast.Name, ast.Constant))]
    if not returns:
        return False
    block, index, statement = rng.choice(returns)
    block.insert(index, ast.Assign([ast.Name(local, ast.Store())], statement.value))
    statement.value = ast.Name(local, ast.Load())
    return True


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.new, node.ctx) if node.id == self.old else node


def _derived_input(body: list[ast.stmt], local: str, rng: random.Random, int_params: list[str],
                   constants: tuple[int, ...]) -> bool:
    if not int_params:
        return False
    param = rng.choice(int_params)
    op = rng.choice((ast.Add(), ast.Mult()))
    renamed = [_Rename(param, local).visit(statement) for statement in body]
    body[:] = [ast.Assign([ast.Name(local, ast.Store())],
                          ast.BinOp(ast.Name(param, ast.Load()), op, ast.Constant(rng.choice(constants))))] + renamed
    return True


_STEP = {"hoist": _hoist, "return_local": _return_local, "derived_input": _derived_input}


def reshape(body: list[ast.stmt], fresh_names: list[str], rng: random.Random, int_params: list[str],
            constants: tuple[int, ...]) -> list[ast.stmt]:
    """A copy of `body` rewritten by one or two steps (module doc), each with the next of `fresh_names`
    as its local; `body` itself when it has a `while` loop or no step applies. int_params: integer
    parameters a derived input may read (not a zero family's divisor)."""
    if any(isinstance(node, ast.While) for statement in body for node in ast.walk(statement)):
        return body
    reshaped, names = copy.deepcopy(body), iter(fresh_names)
    for _ in range(rng.choice((1, 1, 2))):
        local = next(names)
        for step in rng.sample(STEPS, len(STEPS)):  # the first, in a random order, that applies
            if _STEP[step](reshaped, local, rng, int_params=int_params, constants=constants):
                break
    return reshaped


class _Blank(ast.NodeTransformer):
    """Names -> v0, v1, ... by first appearance (other builtins kept, min and max both 'M'); every order
    comparison -> `<`; integers other than 0 and 1 -> 'K'. A mirrored draw has its template's form."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id in ("min", "max"):
            return ast.Name("M", ast.Load())
        if node.id in _BUILTINS:
            return node
        return ast.Name(self.names.setdefault(node.id, f"v{len(self.names)}"), ast.Load())

    def visit_Compare(self, node: ast.Compare) -> ast.Compare:
        self.generic_visit(node)
        node.ops = [ast.Lt() if isinstance(op, _ORDER) else op for op in node.ops]
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        if isinstance(node.value, int) and not isinstance(node.value, bool) and node.value not in (0, 1):
            return ast.Constant("K")
        return node


def body_form(body: list[ast.stmt]) -> str:
    """The body's form: its syntax tree with names and constants blanked (`_Blank`), docstring left out."""
    statements = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    blank = _Blank()
    return ast.dump(ast.Module([blank.visit(copy.deepcopy(s)) for s in statements], []))
