"""Reshaped generated tasks (gym/reshape.py, env.generated_reshape): helper locals that keep the function,
nothing hoisted out of a lazy part, sound and deterministic draws, and never a reserved template's form."""

from __future__ import annotations

import ast
import random

import pytest

from bugfix_rl.gym.generator import RESERVED_FORMS, _Fill, generated_tasks
from bugfix_rl.gym.reshape import _hoist, _hoist_sites, _return_local, body_form, reshape
from bugfix_rl.gym.tasks import make_tasks
from sandboxes import start_sandbox
from test_generator import assert_sound, body_shape

BODIES = {  # body -> inputs to compare the function on before and after a step
    "return max(a) - min(a)": [([3, -1, 7],), ([0],)],
    "t = 0\nfor i in a:\n    t += min(i, 4) * 2\nreturn t + len(a)": [([5, 1, 9],), ([],)],
    "if a + 1 >= b * 2:\n    return a - b\nreturn (a + 3) // 2": [(1, 5), (9, 2), (-4, -4)],
    "t = [i * 3 for i in range(1, a + 1) if i % 2]\nreturn sum(t) - a": [(0,), (6,)],
}


def _function(body: list[ast.stmt], params: str) -> object:
    source = ast.unparse(ast.fix_missing_locations(ast.Module([ast.FunctionDef(
        "f", ast.parse(f"def f({params}): pass").body[0].args, body, [], None)], [])))
    scope: dict = {}
    exec(source, scope)  # noqa: S102  trusted test bodies
    return scope["f"]


@pytest.mark.parametrize("text", list(BODIES))
@pytest.mark.parametrize("step", [_hoist, _return_local])
def test_a_helper_local_keeps_the_function(text, step):
    params = "a, b" if "b" in text else "a"
    original = _function(ast.parse(text).body, params)
    for seed in range(8):
        body = ast.parse(text).body
        if step(body, "h", random.Random(seed)):
            assert ast.dump(ast.Module(body, [])) != ast.dump(ast.parse(text))
        reshaped = _function(body, params)
        for args in BODIES[text]:
            assert reshaped(*args) == original(*args), (ast.unparse(ast.Module(body, [])), args)


@pytest.mark.parametrize("text", ["return a // b if a else 3", "return a and b // 2", "return [x * 2 for x in a]",
                                  "return 0 < a < b + 1", "return sum((x + 1 for x in a))"])
def test_nothing_is_hoisted_out_of_a_lazy_part(text):
    assert _hoist_sites(ast.parse(text).body) == []


def test_a_while_body_is_left_as_it_is():
    body = ast.parse("p = 1\nwhile a != 0:\n    p *= a\n    a = a - 1\nreturn p").body
    assert reshape(body, ["h", "g"], random.Random(0), ["a"], (2, 3)) is body


def test_the_forms_ignore_names_constants_and_mirroring():
    def form(text):
        return body_form([_Fill({}, {"K": 2}, None).visit(s) for s in ast.parse(text).body])

    assert form("lo = min(x)\nhi = max(x)\nreturn hi - lo") == form("p = max(v)\nq = min(v)\nreturn q - p")
    assert form("return a >= b + K") == form("return c < d + 7")
    assert form("return a >= b + 1") != form("return a >= b + 2")
    assert len(RESERVED_FORMS) >= 12


@pytest.fixture(scope="module")
def sandbox():
    with start_sandbox(workers=2) as box:
        yield box


def test_reshaped_draws_are_sound_deterministic_and_never_a_reserved_form(sandbox):
    tasks = generated_tasks(60, seed=3, sandbox=sandbox, reshape=1.0)
    assert [t.source for t in generated_tasks(60, seed=3, sandbox=sandbox, reshape=1.0)] == [t.source for t in tasks]
    assert_sound(tasks, sandbox)
    shapes = {body_shape(t) for t in make_tasks("shapes") + make_tasks("shapes_val")}
    assert not {body_shape(t) for t in tasks} & shapes
    plain = generated_tasks(200, seed=5, sandbox=sandbox)  # every training template's buggy forms, or nearly

    def form(task):
        return body_form(ast.parse(task.source).body[0].body)

    assert sum(form(t) not in {form(p) for p in plain} for t in tasks) >= 30  # most draws: a form no template has


def test_the_config_refuses_flat_pairs_without_the_grammar():
    from bugfix_rl.config import ConfigError, TrainConfig, validate

    cfg = TrainConfig()
    cfg.env.generated_grammar_flat_pairs = True
    with pytest.raises(ConfigError, match="env.generated_grammar_flat_pairs=true needs env.generated_grammar > 0"):
        validate(cfg)
    cfg.env.generated_grammar = 1.0
    validate(cfg)


@pytest.mark.parametrize("family", ["minmax", "compare"])
def test_the_config_refuses_two_line_tasks_without_generated_tasks(family):
    from bugfix_rl.config import ConfigError, TrainConfig, validate

    cfg = TrainConfig()
    setattr(cfg.env, f"generated_two_line_{family}", 0.25)
    with pytest.raises(ConfigError, match=f"env.generated_two_line_{family} > 0 needs env.generated_tasks > 0"):
        validate(cfg)
    cfg.env.generated_tasks = 10
    validate(cfg)


@pytest.mark.parametrize("key", ["generated_reshape", "generated_grammar", "generated_two_line_minmax",
                                 "generated_two_line_compare"])
@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_the_config_refuses_a_share_outside_0_1(share, key):
    from bugfix_rl.config import ConfigError, TrainConfig, validate

    cfg = TrainConfig()
    setattr(cfg.env, key, share)
    with pytest.raises(ConfigError, match=f"env.{key}"):
        validate(cfg)
