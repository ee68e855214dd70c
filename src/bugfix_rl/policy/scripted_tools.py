"""Scripted tools-env policies over the compact front-end (demonstrations, tests, baselines).

Same convention as `policy/scripted.py`: a fresh object per episode, called with the latest
observation text, returning the next turn's words (without the end token).
"""

from __future__ import annotations

import random

from bugfix_rl.gym import ops
from bugfix_rl.gym.tool_calls import CALL_SEPARATOR, FINAL_ANSWER, code_to_words, file_lines, listing_lines
from bugfix_rl.policy.scripted import infer_op


def line_edit(before: str, after: str) -> tuple[str, str]:
    """(old_string, new_string): the whole lines that differ, widened by neighbours until old_string is
    non-empty and occurs once in `before`, so an exact Edit of them turns `before` into `after`."""
    a, b = file_lines(before), file_lines(after)
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    lo, end_a, end_b = prefix, len(a) - suffix, len(b) - suffix
    while end_a == lo or before.count("\n".join(a[lo:end_a])) != 1:
        if end_a < len(a):
            end_a, end_b = end_a + 1, end_b + 1
        elif lo > 0:
            lo -= 1
        else:
            break
    return "\n".join(a[lo:end_a]), "\n".join(b[lo:end_b])


def edit_words(file: str, before: str, after: str) -> list[str]:
    """The compact Edit call that turns `before` into `after`."""
    old, new = line_edit(before, after)
    return ["Edit", file, "old", *code_to_words(old), "new", *code_to_words(new)]


def issue_source_file(issue: str) -> str:
    """The source file named in the issue (`... see pin.py and test_pin.py`)."""
    return next(w for w in issue.split() if w.endswith(".py") and not w.startswith("test_"))


class ToolsOraclePolicy:
    """Read the source -> an exact-line Edit applying the keyword rule's op, then `Bash pytest` in the
    same turn -> the final answer. The fixed source comes from applying the op (gym/ops.py) to the
    source rebuilt from the Read listing."""

    def __init__(self, rng: random.Random | None = None):
        self.file: str | None = None
        self.plan: list[list[str]] = []

    def __call__(self, observation: str) -> list[str]:
        if self.file is None:
            self.file = issue_source_file(observation)
            return ["Read", self.file]
        if not self.plan and self.plan is not None:
            self.plan = None  # the Edit is planned once, from the Read listing
            source = "\n".join(line for _, line in listing_lines(observation.split())) + "\n"
            fixed = getattr(ops, infer_op(observation.split()))(source)
            if fixed is not None:
                return edit_words(self.file, source, fixed) + [CALL_SEPARATOR, "Bash", "pytest"]
        return [FINAL_ANSWER]


class RandomWordsPolicy:
    """Turns of 1-12 words drawn uniformly from `words`: the floor every parser must survive."""

    def __init__(self, rng: random.Random, words: list[str]):
        self.rng, self.words = rng, list(words)

    def __call__(self, observation: str) -> list[str]:
        return self.rng.choices(self.words, k=self.rng.randint(1, 12))


TOOLS_SCRIPTED_POLICIES = {"oracle": ToolsOraclePolicy}
