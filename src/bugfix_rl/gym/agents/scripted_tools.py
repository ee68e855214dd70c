"""Scripted tools-env policies over the compact front-end (demonstrations, tests, baselines).

Same convention as `gym/agents/scripted.py`: a fresh object per episode, called with the latest
observation text, returning the next turn's words (without the end token).
"""

from __future__ import annotations

import ast
import random

from bugfix_rl.gym import ops
from bugfix_rl.gym.agents.scripted import infer_op
from bugfix_rl.gym.tasks import FIX_OPS, Task
from bugfix_rl.gym.tools.code_words import INDENT, NEWLINE, code_to_words_exact, file_lines, listing_lines, words_to_code
from bugfix_rl.gym.tools.syntax_compact import CALL_SEPARATOR, FINAL_ANSWER


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
    return ["Edit", file, "old", *code_to_words_exact(old), "new", *code_to_words_exact(new)]


def run_failed(output: str) -> bool:
    """Whether a Bash result's compact words say the command failed: they end `exit code K` with K not 0
    (gym/tools/shell.py appends it after any cut), as a failing test, a file that does not import or a
    run cut short leaves them; a run that passes ends without it."""
    words = output.split()
    return len(words) >= 3 and words[-3:-1] == ["exit", "code"] and words[-1] != "0"


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


def _listed_source(observation: str) -> str | None:
    """The source rebuilt from a Read listing (`1 def f ( x ) : <nl> 2 ...`), or None if it is not one."""
    try:
        return "\n".join(line for _, line in listing_lines(observation.split())) + "\n"
    except ValueError:
        return None


_CODE_KEYWORDS = frozenset("return for in range min max abs if else while def and or not True False None".split())


class NoisyToolsPolicy:
    """The tools-env behaviour a pretrained model shows before RL (the tools RL base clones it).

    It knows the call syntax but: reads the file first only with probability p_read (else it makes an
    Edit from a line it remembers from other code, refused with `not_read`, and then reads with
    probability p_read_after_fail or gives up); after reading picks the right fix with probability
    p_right_after_read (else another fix op that changes the source, or a remembered line); miscopies
    `old_string` with probability p_miscopy (an operand name replaced by a remembered one: `not_found`),
    then repeats the Edit correctly with probability p_retry; runs the tests in the Edit's turn with
    probability p_test; now and then wanders (an extra Read or test run) or makes a malformed call. When
    those tests fail after a wrong fix (their exit code is not 0: `run_failed`), it Edits the file as
    listed into the right fix (tests again in that turn) with probability p_fix_after_fail, once: the
    test-and-retry habit. With probability
    p_syntax_slip its right Edit is first written with new_string broken as a model breaks it (a block's
    line indented one level short, the last line's words repeated on that line, or its last word left
    out), and when the env refuses it (env.check_edit_syntax) it writes the Edit right in the next turn;
    an Edit that slips is not also miscopied.

    memory: sources of other tasks (the lines it "remembers"); rng draws every choice.
    """

    def __init__(self, rng: random.Random, memory: list[Task], p_read: float = 0.3,
                 p_read_after_fail: float = 0.3, p_right_after_read: float = 0.6, p_miscopy: float = 0.3,
                 p_retry: float = 0.5, p_test: float = 0.4, p_wander: float = 0.15, p_malformed: float = 0.04,
                 p_fix_after_fail: float = 0.0, p_syntax_slip: float = 0.0):
        self.rng, self.memory = rng, memory
        self.p = dict(read=p_read, read_after_fail=p_read_after_fail, right=p_right_after_read,
                      miscopy=p_miscopy, retry=p_retry, test=p_test, wander=p_wander, malformed=p_malformed,
                      fix_after_fail=p_fix_after_fail, syntax_slip=p_syntax_slip)
        self.file: str | None = None
        self.plan: list[list[str]] = []  # turns decided ahead
        self.edited = False  # the Edit was planned (from a listing)
        self.right: str | None = None  # the source with the right fix, once the Edit was planned
        self.fixed_again = False  # the one Edit after failing tests was made

    def _chance(self, key: str) -> bool:
        return self.rng.random() < self.p[key]

    def _remembered_edit(self) -> list[str]:
        """An Edit built from another task's source (a fix op applied to it): old_string is not here."""
        source = self.rng.choice(self.memory).source
        fixed = next((f for f in (getattr(ops, op)(source) for op in self.rng.sample(FIX_OPS, len(FIX_OPS)))
                      if f is not None), source)
        return edit_words(self.file, source, fixed)

    def _fix_edit(self, source: str) -> list[str]:
        """The Edit of the right op, or (1 - p_right_after_read) of the time a wrong one: another fix op
        that changes the source, else the bug's line with one operand name swapped for another."""
        right_op = infer_op(code_to_words_exact(source))
        right = getattr(ops, right_op)(source)
        self.right = right if right != source else None
        if right is not None and self._chance("right"):
            return edit_words(self.file, source, right)
        wrong = [f for f in (getattr(ops, op)(source) for op in FIX_OPS if op != right_op) if f not in (None, source)]
        if wrong:
            return edit_words(self.file, source, self.rng.choice(wrong))
        edit = edit_words(self.file, source, right if right is not None else source)
        split = edit.index("new")
        return edit[:split + 1] + self._swap_a_name(edit[split + 1:], source, must_differ=False)

    def _swap_a_name(self, words: list[str], source: str, must_differ: bool = True) -> list[str]:
        """`words` with one operand name replaced by another name of the same file (a copy from the
        wrong place); with must_differ, only a result that does not occur in `source`."""
        names = sorted({w for w in code_to_words_exact(source) if w.isidentifier() and w not in _CODE_KEYWORDS}
                       - {self.file[:-3]})
        slots = [i for i, w in enumerate(words) if w in names]
        for index in self.rng.sample(slots, len(slots)):
            for name in self.rng.sample(names, len(names)):
                swapped = words[:index] + [name] + words[index + 1:]
                if name != words[index] and not (must_differ and words_to_code(swapped) in source):
                    return swapped
        return words[:-1] if len(words) > 1 else words  # nothing to swap: drop the last word

    def _miscopied(self, edit: list[str], source: str) -> list[str]:
        """The Edit with old_string miscopied (a name copied from the wrong place): `not_found`."""
        split = edit.index("new")
        return edit[:3] + self._swap_a_name(edit[3:split], source) + edit[split:]

    def _fix_after_failing_tests(self, observation: str) -> list[str] | None:
        """The Edit from the file as the observation lists it to the right fix, tests again, when that
        observation's tests failed and the fix is not in (p_fix_after_fail, once); else None. Draws
        nothing while p_fix_after_fail is 0, so the other choices are those of the agent without it."""
        if not self.p["fix_after_fail"] or self.fixed_again or self.right is None:
            return None
        listing, _, tests = observation.partition(f" {CALL_SEPARATOR} ")
        current = _listed_source(listing)
        if current is None or current == self.right or not run_failed(tests):
            return None
        if not self._chance("fix_after_fail"):
            return None
        self.fixed_again = True
        return edit_words(self.file, current, self.right) + [CALL_SEPARATOR, "Bash", "pytest"]

    def _syntax_slip(self, edit: list[str], source: str) -> list[str] | None:
        """The right Edit with new_string broken so that the file would not parse (p_syntax_slip, drawn
        for the right Edit only; nothing is drawn or built while it is 0), or None: `edit` is not the
        right one, no slip drawn, or none of the kinds breaks this Edit."""
        if not self.p["syntax_slip"] or self.right is None or edit != edit_words(self.file, source, self.right):
            return None
        if not self._chance("syntax_slip"):
            return None
        split = edit.index("new")
        old, new = edit[3:split], edit[split + 1:]
        lines, line = [], []
        for word in new:
            if word == NEWLINE:
                lines.append(line)
                line = []
            else:
                line.append(word)
        lines.append(line)
        depth = [next((i for i, w in enumerate(words) if w != INDENT), len(words)) for words in lines]
        slips = []
        for i in range(1, len(lines)):  # a line deeper than the one before it, one level short
            if depth[i] > depth[i - 1]:
                slips.append(lines[:i] + [lines[i][1:]] + lines[i + 1:])
        slips.append(lines[:-1] + [lines[-1] + lines[-1][depth[-1]:]])  # the last line's words again, on it
        if len(lines[-1]) > depth[-1] + 1:
            slips.append(lines[:-1] + [lines[-1][:-1]])  # the last word left out
        old_code = words_to_code(old)
        for slipped in self.rng.sample(slips, len(slips)):
            words = [w for k, words in enumerate(slipped) for w in ([NEWLINE] if k else []) + words]
            try:
                new_code = words_to_code(words)
            except ValueError:  # a layout word left mid-line: the env would call it malformed, not refuse it
                continue
            try:
                ast.parse(source.replace(old_code, new_code, 1))
            except (SyntaxError, ValueError):
                return edit[:split + 1] + words
        return None

    def _malformed(self, words: list[str]) -> list[str]:
        if self._chance("malformed"):
            return self.rng.choice([["Edit", self.file], ["Read"], ["Edit", self.file, "new", "x"],
                                    ["Bash"], ["done", ";", "Read", self.file]])
        return words

    def __call__(self, observation: str) -> list[str]:
        if self.file is None:  # the issue: read first, or edit from memory (refused: not_read)
            self.file = issue_source_file(observation)
            return self._malformed(["Read", self.file] if self._chance("read") else self._remembered_edit())
        if self.plan:
            again = self._fix_after_failing_tests(observation)
            return self._malformed(again if again is not None else self.plan.pop(0))
        if not self.edited and observation.startswith("error : not_read"):
            return self._malformed(["Read", self.file]) if self._chance("read_after_fail") else [FINAL_ANSWER]
        source = _listed_source(observation)
        if self.edited or source is None:  # the edit was made, or nothing to work from
            return [FINAL_ANSWER]
        self.edited = True
        edit = self._fix_edit(source)
        tests = [CALL_SEPARATOR, "Bash", "pytest"] if self._chance("test") else []
        if self._chance("wander"):
            self.plan.append(self.rng.choice([["Read", self.file], ["Bash", "pytest"]]))
        self.plan.append([FINAL_ANSWER])
        slipped = self._syntax_slip(edit, source)
        if slipped is not None:  # refused (env.check_edit_syntax); the right Edit next
            self.plan.insert(0, edit + tests)
            return self._malformed(slipped)
        if self._chance("miscopy"):
            if self._chance("retry"):
                self.plan.insert(0, edit + tests)
            return self._malformed(self._miscopied(edit, source))
        return self._malformed(edit + tests)


class RandomWordsPolicy:
    """Turns of 1-12 words drawn uniformly from `words`: the floor every parser must survive."""

    def __init__(self, rng: random.Random, words: list[str]):
        self.rng, self.words = rng, list(words)

    def __call__(self, observation: str) -> list[str]:
        return self.rng.choices(self.words, k=self.rng.randint(1, 12))


TOOLS_SCRIPTED_POLICIES = {"oracle": ToolsOraclePolicy, "noisy": NoisyToolsPolicy}
