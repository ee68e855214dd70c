"""scripts/shapes_ceiling.py --widen-edits: a widened Edit is the same change as the scripted one."""

import random

from bugfix_rl.gym import ops
from bugfix_rl.gym.agents.scripted import infer_op
from bugfix_rl.gym.agents.scripted_tools import line_edit
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.gym.tools.code_words import code_to_words_exact
from repo_scripts import load_script


def test_a_widened_edit_occurs_once_makes_the_same_fix_and_is_one_line_longer():
    widened_line_edit, rng = load_script("shapes_ceiling").widened_line_edit, random.Random(0)
    checked = 0
    for task in make_tasks("train") + make_tasks("shapes"):
        fixed = getattr(ops, infer_op(code_to_words_exact(task.source)))(task.source)
        if fixed is None:
            continue
        old, new = line_edit(task.source, fixed)
        for _ in range(4):
            wide_old, wide_new = widened_line_edit(task.source, fixed, 1.0, rng)
            assert task.source.count(wide_old) == 1 and task.source.replace(wide_old, wide_new) == fixed
            assert wide_old.count("\n") == old.count("\n") + 1 and old in wide_old and new in wide_new
            checked += 1
        assert widened_line_edit(task.source, fixed, 0.0, rng) == (old, new)
    assert checked >= 200


def test_an_edit_widened_by_up_to_three_lines_is_the_same_fix_and_draws_every_width():
    widened_line_edit, rng = load_script("shapes_ceiling").widened_line_edit, random.Random(1)
    widths = set()
    for task in make_tasks("train"):
        fixed = getattr(ops, infer_op(code_to_words_exact(task.source)))(task.source)
        if fixed is None:
            continue
        old, _ = line_edit(task.source, fixed)
        for _ in range(6):
            wide_old, wide_new = widened_line_edit(task.source, fixed, 1.0, rng, most_lines=3)
            assert task.source.count(wide_old) == 1 and task.source.replace(wide_old, wide_new) == fixed
            widths.add(wide_old.count("\n") - old.count("\n"))
    assert widths == {1, 2, 3}  # a short file can stop it early, never make it longer
