"""docs/TASKS.md's example cannot rot: its code blocks run here, in order, and must print what the page
says; the page's claims about Task (closed families, open names) are checked against the code."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from bugfix_rl.gym.task_checks import edit_menu_oracle_problem, op_problem
from bugfix_rl.gym.tasks import FAMILIES, Task, make_tasks
from bugfix_rl.policy.tokenizer import build_tokenizer

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "TASKS.md"


def _blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), flags=re.S | re.M)


@pytest.fixture(scope="module")
def example() -> dict:
    """The namespace the guide's first block (the task definitions) leaves."""
    namespace: dict = {}
    exec(_blocks()[0], namespace)
    return namespace


def test_the_guides_check_prints_what_the_guide_says():
    from bugfix_rl.sandbox import SandboxUnavailable

    first, check = _blocks()
    namespace: dict = {}
    exec(first, namespace)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(check, namespace)
    except SandboxUnavailable as error:
        pytest.skip(f"sandbox unavailable on this machine: {error}")
    said = re.search(r"print\(problems\)  # (.*)$", check, flags=re.M).group(1)
    assert printed.getvalue().strip() == said == repr(namespace["problems"])
    assert namespace["problems"][0] is None  # the example task is sound, in both envs, on the sandbox


def test_the_example_passes_the_in_process_checks_and_the_leaky_one_does_not(example):
    task, leaky = example["task"], example["leaky"]
    assert (task.family, task.fix_op) == ("compare", "fix_comparison")
    assert op_problem(task) is None and edit_menu_oracle_problem(task) is None
    assert op_problem(leaky) == "the bug fails no hidden test beyond the public inputs"


def test_the_examples_names_are_outside_the_vocabulary(example):
    words = set(build_tokenizer(make_tasks("all")).words)
    assert not {"in_stock", "wanted", "on_hand"} & words  # the page's "names are open" rests on this


def test_a_family_outside_the_five_is_refused():
    assert len(FAMILIES) == 5
    with pytest.raises(KeyError):
        Task("sorting/bubble", "f", "def f(xs):\n    return xs\n", (), (), "train")
