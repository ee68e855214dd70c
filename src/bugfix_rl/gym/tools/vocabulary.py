"""The tools env's words: those the compact syntax and its observations use beyond the gym's.

`tools_vocabulary(tasks)` is what `build_tokenizer(tasks, extra_words=...)` adds for the tools env:
the call layer's own words (`call_layer_words`), the failure kinds a compact turn can cause, and the
words of every task's repo files under every name. A word an episode produces beyond these takes one
of the tokenizer's out-of-vocabulary slots (policy/tokenizer.py); `known_words` are those that do not.
"""

from __future__ import annotations

from functools import lru_cache

from bugfix_rl.gym.edit_menu import RENAME_POOL
from bugfix_rl.gym.tasks import ALL_OPS, ALL_TASKS, Task
from bugfix_rl.gym.tools.calls import COMPACT_FAILURE_KINDS, MALFORMED_REASONS, TOOL_NAMES
from bugfix_rl.gym.tools.code_words import LAYOUT_WORDS, code_to_words
from bugfix_rl.gym.tools.repo import apply_op_or_none, issue_words, make_repo, source_file
from bugfix_rl.gym.tools.syntax_compact import CALL_SEPARATOR, COMPACT_KEYWORDS, FINAL_ANSWER
from bugfix_rl.gym.vocabulary import gym_words

_BASH_WORDS = "pytest python -m ls cat grep -n -i -q -v -x cd /repo && exit".split()
_OUTPUT_WORDS = (
    "ok empty code ... error : malformed passed failed skipped errors no tests ran where assert + = Error ERROR "
    "file or directory not found Interrupted during collection Traceback most recent call last File line "
    "in module SyntaxError IndentationError NameError TypeError ZeroDivisionError AssertionError "
    "ValueError IndexError invalid syntax integer division by zero modulo is not defined name expected "
    "an indented block unexpected indent object ' \" print len abs sum int str list dict set tuple sorted "
    "enumerate zip isinstance float bool "
).split()


def call_layer_words() -> set[str]:
    """The words of the call layer itself: tool and keyword words, layout words, malformed reasons,
    Bash and test-output words, line numbers. `tools_vocabulary` adds the failure kinds and every
    task's repo words."""
    words = set(TOOL_NAMES) | set(COMPACT_KEYWORDS) | set(LAYOUT_WORDS) | set(MALFORMED_REASONS)
    words |= set(_BASH_WORDS) | set(_OUTPUT_WORDS)
    # `?` stood for every word outside the vocabulary before episode slots (issue 35); kept, so that
    # word ids and the checkpoints built on them stay as they were
    return words | {CALL_SEPARATOR, FINAL_ANSWER, "?"} | {str(n) for n in range(100)}


def repo_words(task: Task) -> set[str]:
    """Words of the task's repo files, its issue, and its source after each op, under every name."""
    words: set[str] = set()
    for name in (task.fn_name,) + RENAME_POOL:
        repo = make_repo(task, name)
        texts = list(repo.values()) + [apply_op_or_none(task, repo[source_file(name)], op) or "" for op in ALL_OPS]
        for text in texts:
            words.update(code_to_words(text))
        words.update(issue_words(name).split())
    return words


def tools_vocabulary(tasks) -> set[str]:
    """Every word the compact front-end needs beyond the gym's: the call layer's words
    (`call_layer_words`), the failure kinds, and the words of every task's repo files (and
    of every op applied to its source) under its own name and every rename.

    Build the tokenizer with `build_tokenizer(tasks, extra_words=tools_vocabulary(tasks))`; a word an
    episode produces beyond these takes one of its out-of-vocabulary slots (policy/tokenizer.py).
    """
    words = call_layer_words() | set(COMPACT_FAILURE_KINDS)
    for task in tasks:
        words |= repo_words(task)
    return words


@lru_cache(maxsize=1)
def known_words() -> frozenset[str]:
    """Words with an id of their own in a tokenizer built from all tasks with `tools_vocabulary` (others
    take an episode's slot)."""
    return frozenset(gym_words(list(ALL_TASKS)) | tools_vocabulary(ALL_TASKS))
