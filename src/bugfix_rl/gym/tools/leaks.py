"""The tools env's leak canaries: hidden test inputs that an observation can show only by a leak.

A hidden-only input of the task (`hidden_input_canaries`), written as code words, that shows up in an
observation, and that the model had not written itself in one of its calls, marks the episode
`leaked_input` (`ToolsEnv._watch_for_leaks`); it pays 0 and counts in the metric `leaked`. The run
goes on: here the model's own output reaches observations, so a policy must not be able to stop it.
"""

from __future__ import annotations

from functools import lru_cache

from bugfix_rl.gym.tasks import ALL_OPS, Task
from bugfix_rl.gym.tools.code_words import code_to_words
from bugfix_rl.gym.tools.repo import apply_op_or_none, make_repo, source_file


def _input_forms(args: tuple) -> set[str]:
    """Code words of a test input as a call shows it, `( 7 , 1 , 9 )`, and as its tuple's repr,
    `( 0 , )` for one argument (how a leaked list of inputs would print)."""
    call = "(" + ", ".join(repr(arg) for arg in args) + ")"
    return {" ".join(code_to_words(call)), " ".join(code_to_words(repr(tuple(args))))}


@lru_cache(maxsize=1024)  # keyed by the Task object (eq=False: identity); one per base task, variant or copy
def hidden_input_canaries(task: Task) -> tuple[str, ...]:
    """The tools env's leak canaries: each hidden test's input (`_input_forms`) that is no public
    input and occurs in no text of the task's repo, nor in its source after any op, so an observation
    can show it only by a leak (or by the model's own doing, which the env tells apart)."""
    public = set().union(*(_input_forms(args) for args, _ in task.public_tests))
    repo = make_repo(task, task.fn_name)
    texts = list(repo.values()) + [apply_op_or_none(task, repo[source_file(task.fn_name)], op) or ""
                                   for op in ALL_OPS]
    shown = " " + " ".join(" ".join(code_to_words(text)) for text in texts) + " "
    return tuple(sorted({form for args, _ in task.hidden_tests for form in _input_forms(args)
                         if form not in public and f" {form} " not in shown}))
