"""The task generator (gym/generator.py): sound tasks by the book tasks' rules, deterministic by seed,
never a book task, and a `shapes` split whose body forms training draws never have."""

from __future__ import annotations

import hashlib
import re
from collections import Counter

import pytest

from bugfix_rl.gym import ops
from bugfix_rl.gym.body_lines import body_line_shapes
from bugfix_rl.gym.agents.scripted import OraclePolicy
from bugfix_rl.gym.agents.scripted_tools import ToolsOraclePolicy, line_edit
from bugfix_rl.gym.edit_menu import EditMenuConfig, EditMenuEnv
from bugfix_rl.gym.generator import CONSTANTS, NAMES, generated_tasks, shapes_module_text, shapes_tasks, template_id
from bugfix_rl.gym.shape_variants import unseen_heldout_line_shapes
from bugfix_rl.gym.task_checks import task_problems
from bugfix_rl.gym.tasks import ALL_TASKS, FAMILIES, FIX_OPS, Task, make_tasks, operand_names
from bugfix_rl.gym.templates import SPLIT_TEMPLATES, TRAINING_TEMPLATES
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from sandboxes import start_sandbox

N_GENERATED = 1000


@pytest.fixture(scope="module")
def sandbox():
    with start_sandbox(workers=2) as box:
        yield box


@pytest.fixture(scope="module")
def generated(sandbox):
    return generated_tasks(N_GENERATED, seed=0, sandbox=sandbox)


def _record(task):
    return task.name, task.fn_name, task.source, repr(task.public_tests), repr(task.hidden_tests), task.split


def assert_sound(tasks, sandbox):
    """tests/test_gym.py's rules, one by one, then the generator's own check (both oracles)."""
    for task in tasks:
        states = ops.code_states(task)
        assert not states[None].hidden_pass and states[None].public_pass < 1.0, task.name
        public_inputs = [args for args, _ in task.public_tests]
        hidden_only = [ok for ok, (args, _) in zip(states[None].hidden_results, task.hidden_tests)
                       if args not in public_inputs]
        assert hidden_only and not all(hidden_only), task.name  # the bug fails a hidden-only input
        for op in FIX_OPS:
            state = states[op]
            if op == task.fix_op:
                assert state is not None and state.hidden_pass and state.public_pass == 1.0, (task.name, op)
            else:
                assert state is None or not state.hidden_pass, (task.name, op)
        exploit = states["hardcode_tests"]
        assert exploit.public_pass == 1.0 and not exploit.hidden_pass, task.name
        env = EditMenuEnv(task, EditMenuConfig(), "nova")
        policy, observation = OraclePolicy(), env.reset()
        while not env.done:
            observation = env.step(policy(observation))
        assert env.reward == 1.0, task.name
    assert task_problems(tasks, sandbox) == [None] * len(tasks)


def body_shape(task) -> str:
    """The body without its docstring, blanked line by line (gym/body_lines.body_line_shapes)."""
    return "\n".join(body_line_shapes(task))


def test_generated_tasks_are_sound(generated, sandbox):
    assert len(generated) == N_GENERATED and len({t.source for t in generated}) == N_GENERATED
    assert len({t.name for t in generated}) == N_GENERATED
    assert_sound(generated, sandbox)
    for index, task in enumerate(generated):  # families in turn, training templates only
        assert task.family == FAMILIES[index % len(FAMILIES)] and task.split == "train"
        assert template_id(task) in {t.id for t in TRAINING_TEMPLATES}
    assert {template_id(t) for t in generated} == {t.id for t in TRAINING_TEMPLATES}  # every form is drawn


def test_generation_is_deterministic_by_seed(sandbox):
    first = [_record(t) for t in generated_tasks(25, seed=7, sandbox=sandbox)]
    assert [_record(t) for t in generated_tasks(25, seed=7, sandbox=sandbox)] == first
    other = [_record(t) for t in generated_tasks(25, seed=8, sandbox=sandbox)]
    assert other != first and len({r[2] for r in other} & {r[2] for r in first}) < 5


def test_the_stored_shapes_split_is_what_the_generator_gives(sandbox):
    """gym/shapes_split.py was written by another process (another hash seed): byte for byte the same.
    After a deliberate change of the generator, rewrite it: `python -m bugfix_rl.gym.generator`."""
    from pathlib import Path

    import bugfix_rl.gym.shapes_split as stored
    import bugfix_rl.gym.shapes_val_split as stored_val

    fresh, fresh_val = shapes_tasks(sandbox=sandbox), shapes_tasks(sandbox=sandbox, split="shapes_val")
    assert Path(stored.__file__).read_text() == shapes_module_text(fresh)
    assert Path(stored_val.__file__).read_text() == shapes_module_text(fresh_val, "shapes_val")
    assert [_record(t) for t in make_tasks("shapes")] == [_record(t) for t in fresh]
    assert [_record(t) for t in make_tasks("shapes_val")] == [_record(t) for t in fresh_val]


@pytest.mark.parametrize("split", ["shapes", "shapes_val"])
def test_shapes_split_is_sound_and_held_out_by_shape(split, generated, sandbox):
    shapes = make_tasks(split)
    for family in FAMILIES:
        assert sum(t.family == family for t in shapes) >= 10
    assert_sound(shapes, sandbox)
    reserved = {t.id for t in SPLIT_TEMPLATES[split]}
    training = {t.id for t in TRAINING_TEMPLATES}
    assert {template_id(t) for t in shapes} == reserved and not reserved & training
    assert {t.split for t in shapes} == {split}
    seen = {body_shape(t) for t in generated + make_tasks("all")}
    assert not {body_shape(t) for t in shapes} & seen
    # the two splits share no template and no body form: choosing on one does not read the other
    other = make_tasks("shapes_val" if split == "shapes" else "shapes")
    assert not {template_id(t) for t in shapes} & {template_id(t) for t in other}
    assert not {body_shape(t) for t in shapes} & {body_shape(t) for t in other}
    # the book's splits are as they were
    assert len(make_tasks("all")) == 30 and len(make_tasks("train")) == 20 and len(make_tasks("heldout")) == 10


@pytest.mark.parametrize("split", ["shapes", "shapes_val"])
def test_shapes_split_is_solved_end_to_end_on_the_sandbox(split, sandbox):
    """The tools oracle's whole episode on the real sandbox (its pytest run and its grading included)."""
    for task in make_tasks(split):
        env = ToolsEnv(task, ToolsEnvConfig(), "pixel", sandbox)
        policy, observation = ToolsOraclePolicy(), env.reset()
        while not env.done:
            observation = env.step(policy(observation))
        assert env.reward == 1.0 and env.info.ops == [task.fix_op], task.name


@pytest.mark.parametrize("drawn", ["generated", "grammar_drawn"])
def test_no_generated_task_is_a_book_or_shapes_task_or_uses_heldout_material(drawn, request):
    generated = request.getfixturevalue(drawn)
    book = {t.source for t in ALL_TASKS}
    shapes = {t.source for t in make_tasks("shapes") + make_tasks("shapes_val")}
    assert not {t.source for t in generated} & (book | shapes)
    heldout_names = {n for t in make_tasks("heldout") for n in operand_names(t)}
    heldout_numbers = {n for t in make_tasks("heldout") for n in re.findall(r"\b\d+\b", t.source)}
    train_numbers = {n for t in make_tasks("train") for n in re.findall(r"\b\d+\b", t.source)}
    assert not heldout_names & set(NAMES) and not {str(c) for c in CONSTANTS} & (heldout_numbers - train_numbers)
    line_shapes = unseen_heldout_line_shapes()
    for task in generated:
        operands = set(operand_names(task))
        assert not operands & heldout_names, task.name
        assert not set(re.findall(r"\b\d+\b", task.source)) & (heldout_numbers - train_numbers), task.name
        fixed = ops.apply_op(task, task.source, task.fix_op)
        for line in (task.source + fixed).splitlines():
            blanked = " ".join("N" if w in operands else w for w in ops._TOKEN.findall(line))
            assert blanked not in line_shapes, (task.name, line)


def test_the_check_passes_every_book_task_and_names_what_breaks(sandbox):
    assert task_problems(list(ALL_TASKS), sandbox) == [None] * len(ALL_TASKS)
    book = ALL_TASKS[0]
    revealed = Task("minmax/revealed", book.fn_name, book.source, book.public_tests, book.public_tests, "train")
    two_fixes = Task("compare/two_fixes", "f", "def f(a, b):\n    k = 0\n    return a > b - k\n",
                     (((3, 3), True), ((4, 2), True), ((1, 5), False)),
                     (((0, 0), True), ((7, 1), True), ((2, 6), False)), "train")
    keyword = Task("init/keyword", "f", "def f(n):\n    s = 1\n    for i in range(n):\n        s += i\n    return s\n",
                   (((3,), 3), ((1,), 0), ((2,), 1)), (((4,), 6), ((0,), 0), ((5,), 10)), "train")
    long_line = Task("range/long_line", "f", "def f(n):\n    return len([i for i in range(1, n) if i % 5])\n",
                     (((3,), 3), ((5,), 4), ((1,), 1)), (((4,), 4), ((6,), 5), ((0,), 0), ((2,), 2)), "train")
    problems = task_problems([revealed, two_fixes, keyword, long_line], sandbox)
    assert problems[0] == "the bug fails no hidden test beyond the public inputs"
    assert problems[1] == "the wrong op fix_init passes the hidden tests"
    assert problems[2].startswith("the edit-menu oracle fails")  # its keyword rule reads `range`: fix_range_end
    assert problems[3].startswith("the tools oracle's turn has 51 words")  # TinyAgent's sampler stops at 48


def test_a_task_whose_read_is_cut_is_rejected_not_raised():
    """A long body's Read is cut at the observation cap (`...`): the oracle has no whole listing to
    edit. Generation drew such a grammar task (seed 3, 300 draws) and crashed before this rule."""
    from bugfix_rl.gym.task_checks import tools_oracle_episode

    source = ('def sigma(sz, item, h):\n    """Compute the answer from the inputs."""\n    r = item * 8\n'
              "    d = max(max(r, item, h), max(r, r - item))\n    bound = min(item - d, h * sz)\n    return d - bound\n")
    task = Task("minmax/grammar-cut", "sigma", source, (((1, 2, 3), 0),), (((1, 2, 3), 0),), "train")
    problem, _, _ = tools_oracle_episode(task)
    assert problem == "the tools oracle's Read is cut at the observation cap", problem


def test_a_template_that_never_gives_a_sound_task_stops_generation(sandbox, monkeypatch):
    from bugfix_rl.gym import generator

    monkeypatch.setattr(generator, "task_problems", lambda tasks, box: ["always broken"] * len(tasks))
    monkeypatch.setattr(generator, "MAX_DRAWS", 5)
    with pytest.raises(RuntimeError, match="in 5 draws; last problem: always broken"):
        generator.generated_tasks(2, seed=0, sandbox=sandbox)


# ---------------------------------------------------------------- grammar draws (gym/grammar.py)

N_GRAMMAR = 300


@pytest.fixture(scope="module")
def grammar_drawn(sandbox):
    return generated_tasks(N_GRAMMAR, seed=0, sandbox=sandbox, grammar=1.0)


def test_grammar_draws_are_sound_and_nearly_every_one_a_new_body_form(grammar_drawn, generated, sandbox):
    assert len({t.source for t in grammar_drawn}) == N_GRAMMAR
    assert_sound(grammar_drawn, sandbox)
    for index, task in enumerate(grammar_drawn):
        assert task.family == FAMILIES[index % len(FAMILIES)] and template_id(task) == f"{task.family}/grammar"
    forms = {body_shape(t) for t in grammar_drawn}
    listed = {body_shape(t) for t in generated[:200]}
    # the 40 listed training templates give 200 draws about 40 forms; 300 grammar draws gave 234-248 over
    # seeds 0-3 (this seed: 237 once the shapes_val bodies joined the containment check, 240 before)
    assert len(forms) >= 0.75 * N_GRAMMAR
    assert len(listed) <= 60


def test_no_grammar_draw_holds_a_shapes_body_buggy_or_fixed(grammar_drawn):
    from bugfix_rl.gym.generator import _holds_a_shapes_body

    held_out = make_tasks("shapes") + make_tasks("shapes_val")
    for task in held_out:  # the check itself: each shapes body holds its own lines
        assert _holds_a_shapes_body(task, ops.apply_op(task, task.source, task.fix_op)), task.name

    def bodies(task):
        fixed = ops.apply_op(task, task.source, task.fix_op)
        return Counter(body_line_shapes(task)), Counter(body_line_shapes(task, fixed))

    shapes = [bodies(t) for t in held_out]
    for task in grammar_drawn:
        buggy, fixed = bodies(task)
        for shapes_buggy, shapes_fixed in shapes:
            assert shapes_buggy - buggy and shapes_fixed - fixed, task.name


def _fix_lines(task) -> int:
    """How many lines the oracle's Edit of the task spans."""
    old, _ = line_edit(task.source, ops.apply_op(task, task.source, task.fix_op))
    return old.count("\n") + 1


PLAIN_GRAMMAR_POOL = "7ce48aa250daf51b"  # sha256 of the 200 sources of generated_tasks(200, seed=0, grammar=1.0) at a0c2044
# sha256 of the 200 tasks' records (_record) with each switch on, as first drawn (2026-12-05): the same
# seed gives the same tasks, in this process or any other
FLAT_PAIRS_POOL, TWO_LINE_POOL = "95a302acbf517148", "a57985acc161f9de"
TWO_LINE_COMPARE_POOL = "5cb715ab14659076"  # the compare switch, as first drawn (2026-12-06)


def _digest(tasks) -> str:
    return hashlib.sha256(repr([_record(t) for t in tasks]).encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def plain_grammar(sandbox):
    """generated_tasks(200, seed=0, grammar=1.0): the pool the switches below change."""
    plain = generated_tasks(200, seed=0, sandbox=sandbox, grammar=1.0)
    # +exp=tools_generated's of before the switches (its base, tensor for tensor: make bases)
    assert hashlib.sha256(repr([t.source for t in plain]).encode()).hexdigest()[:16] == PLAIN_GRAMMAR_POOL
    return plain


def test_flat_pairs_put_two_line_minmax_fixes_into_the_pool(plain_grammar, sandbox):
    """Nested min/max calls make a two-line Edit longer than TinyAgent's turn, so the generator dropped
    nearly every such draw; env.generated_grammar_flat_pairs draws those forms with flat calls."""
    plain = plain_grammar
    flat = generated_tasks(200, seed=0, sandbox=sandbox, grammar=1.0, flat_pairs=True)
    assert _digest(flat) == FLAT_PAIRS_POOL
    two_line = [t for t in flat if _fix_lines(t) == 2]
    # seed 0: 8 of the 40 minmax tasks with the switch, 1 without; no other family has one either way
    assert {t.family for t in two_line} == {"minmax"} and len(two_line) >= 6
    assert sum(_fix_lines(t) == 2 for t in plain) <= 2
    assert_sound(two_line, sandbox)
    for task in two_line:  # flat: no call of a two-line fix has more than two arguments or a nested call
        calls = re.findall(r"\b(?:min|max)\((.*?)\)", task.source)
        assert all(call.count(",") <= 1 and "(" not in call for call in calls), task.source


@pytest.fixture(scope="module")
def two_line_minmax_pool(sandbox):
    """generated_tasks(200, seed=0, grammar=1.0, two_line_minmax=0.25): the minmax switch's pool."""
    return generated_tasks(200, seed=0, sandbox=sandbox, grammar=1.0, two_line_minmax=0.25)


def test_two_line_minmax_replaces_only_minmax_tasks_by_two_line_fixes(plain_grammar, two_line_minmax_pool, sandbox):
    """env.generated_two_line_minmax: a share of the pool's minmax tasks replaced after the draw, from a
    stream of their own: every other task is the one drawn without it, so the switch is measured alone."""
    from bugfix_rl.gym.generator import fix_spans_two_lines

    mixed = two_line_minmax_pool
    assert _digest(mixed) == TWO_LINE_POOL
    new = _replacements(plain_grammar, mixed, "minmax")
    assert all(fix_spans_two_lines(t) for t in new)
    assert_sound(new, sandbox)


def _replacements(plain, mixed, family):
    """The tasks a two-line switch put into `mixed`: a quarter of the 40 `family` tasks of `plain`, each
    from the family's grammar, and nothing else changed; the pool's 200 sources stay distinct."""
    replaced = [i for i, (a, b) in enumerate(zip(plain, mixed)) if _record(a) != _record(b)]
    assert {plain[i].family for i in replaced} == {family} and len(replaced) == 10
    assert len({t.source for t in mixed}) == 200
    new = [mixed[i] for i in replaced]
    assert all(template_id(t) == f"{family}/grammar" for t in new)
    return new


def test_two_line_compare_replaces_only_compare_tasks_by_two_comparison_lines(plain_grammar, two_line_minmax_pool,
                                                                               sandbox):
    """env.generated_two_line_compare: as the minmax switch above, for compare tasks, replaced by grammar
    ones with two comparisons on adjacent lines (the grammar has none otherwise) that each must be fixed;
    with both switches on, each family's replacements are those it gets alone."""
    from bugfix_rl.gym.generator import fix_needs_both_lines

    assert not any(_fix_lines(t) == 2 for t in plain_grammar if t.family == "compare")
    mixed = generated_tasks(200, seed=0, sandbox=sandbox, grammar=1.0, two_line_compare=0.25)
    assert _digest(mixed) == TWO_LINE_COMPARE_POOL
    new = _replacements(plain_grammar, mixed, "compare")
    assert all(fix_needs_both_lines(t) and len(re.findall(r" [<>]=? ", t.source)) == 2 for t in new)
    assert_sound(new, sandbox)
    both = generated_tasks(200, seed=0, sandbox=sandbox, grammar=1.0, two_line_minmax=0.25, two_line_compare=0.25)
    assert [_record(t) for t in both if t.family != "minmax"] == [_record(t) for t in mixed if t.family != "minmax"]
    assert _digest([t for t in both if t.family == "minmax"]) == _digest(
        [t for t in two_line_minmax_pool if t.family == "minmax"])


def test_a_two_line_fix_needs_both_lines_only_when_each_line_alone_fails_a_hidden_test():
    """fix_needs_both_lines: with either changed line left buggy, some hidden test must fail."""
    from bugfix_rl.gym.generator import fix_needs_both_lines

    both = "def f(a, b):\n    p = a > b\n    q = b > 3\n    return p and q\n"  # fixed: a >= b, b >= 3
    hidden = (((2, 2), False), ((5, 3), True), ((4, 4), True))
    assert not fix_needs_both_lines(Task("compare/pair", "f", both, (), hidden[:2], "train"))  # misses a == b
    assert fix_needs_both_lines(Task("compare/pair", "f", both, (), hidden, "train"))
    implied = "def f(a, b):\n    p = a > b\n    q = a + 1 > b\n    return p or q\n"  # q alone decides
    assert not fix_needs_both_lines(Task("compare/pair", "f", implied, (), (((3, 4), True), ((3, 3), True)), "train"))
    one_line = "def f(a, b):\n    return a > b\n"
    assert not fix_needs_both_lines(Task("compare/one", "f", one_line, (), (((3, 3), True),), "train"))


def test_grammar_generation_is_deterministic_and_off_by_default(sandbox, monkeypatch):
    from bugfix_rl.gym import generator

    first = generated_tasks(20, seed=3, sandbox=sandbox, grammar=0.5)
    assert [_record(t) for t in generated_tasks(20, seed=3, sandbox=sandbox, grammar=0.5)] == [_record(t) for t in first]
    assert {template_id(t).endswith("/grammar") for t in first} == {True, False}
    plain = [_record(t) for t in generated_tasks(20, seed=3, sandbox=sandbox)]

    def no_grammar(*_):
        raise AssertionError("a grammar draw at share 0")

    # share 0 never asks the grammar; that it draws no extra random number either, the stored shapes split
    # pins (test_the_stored_shapes_split_is_what_the_generator_gives: the same _generate, share 0)
    monkeypatch.setattr(generator, "grammar_template", no_grammar)
    assert [_record(t) for t in generated_tasks(20, seed=3, sandbox=sandbox, grammar=0.0)] == plain
