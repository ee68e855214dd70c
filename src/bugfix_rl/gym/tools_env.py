"""The Claude-Code tools environment (`env=tools`): Read, Edit, Write, Bash over an in-memory repo.

Per episode the repo holds `<name>.py` (the buggy source, renamed to `shown_name`) and `test_<name>.py`
(one test function per public test); hidden tests never enter it. The model writes the fix itself.
This module is the tool layer: it executes `ToolCall`s and returns `ToolResult`s, and never sees model
text; `gym/tool_calls.py` holds the two front-ends (compact words for TinyAgent, JSON for Qwen3).

Semantics (SPEC §2), with the choices made here:
- A turn is up to `max_calls_per_turn` calls, run in order; every call after that (malformed ones
  count toward the limit too) is refused with `too_many_calls`. A turn with no call is the final
  answer and ends the episode; otherwise it ends after `max_turns` turns.
- Malformed calls (unparseable / schema mismatch, `tool_calls.MALFORMED_REASONS`) and failed calls
  (refused by a tool, FAILURE_KINDS) are counted apart; both give an error result and use the turn.
- Read marks a file read; Edit and overwriting Write need it (`not_read`); a Write marks its file
  read. Edit checks, in order: file_not_found, not_read, no_change, not_found, not_unique (then
  too_large, a size cap on any file Edit or Write leaves).
- Bash is a whitelist simulation, not a shell (see `_plan_command`): `ls`, `cat` and `grep` read the
  in-memory repo here; `pytest`, `python -m pytest`, `python test_<name>.py` (run as that file's
  tests) and `python <file>.py` run in the sandbox, which the model's code never leaves. Bash's
  `timeout` is accepted but the sandbox's own wall limit applies.
- Time: per-run limits would add up within one step (a Bash call chains up to MAX_CHAIN runs, a turn
  holds max_calls_per_turn calls), so all the sandbox runs of one `step` share `step_budget_s` of wall
  clock: each run's limit is cut to what is left, and once it is spent a run is not started; either
  way its output says `step time budget of N s spent` and the episode goes on. On the turn that ends
  the episode the runs get half the budget, and grading (one job, within its own limit) the rest.
- Leak canary (`leak_canary`): a hidden-only input of the task (`hidden_input_canaries`) that shows
  up in an observation, and that the model had not written itself in one of its calls, marks the
  episode `leaked_input`; it pays 0 and counts in the metric `leaked`. The run goes on: here the
  model's own output reaches observations, so a policy must not be able to stop it.
- Reward: at the episode's end (final answer, turn limit, or the sampler's context limit), the final
  `<name>.py` is graded by the sandbox's parent-side comparison on hidden + public cases: reward 1
  iff all hidden pass (`reward=public`: iff all public pass).

Everything a model writes is an attack surface here: no model text reaches a backtracking regex
(grep runs on RE2, the parsers are plain scans), every size is capped (a file, the repo, an Edit's
result before it is built), Write refuses file names the sandbox could not create (`bad_file_name`)
and `.py` files Python's own parser gives up on (`too_complex`), and the op classifier and the
probes turn any failure into a non-answer. So `step` raises only for internal reasons (the sandbox
gone); the rollout loop ends such an episode as failed (`rollout/env_errors.py`, `info.env_error`).
"""

from __future__ import annotations

import ast
import random
import re
import shlex
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

import re2

from bugfix_rl.config import EnvConfig
from bugfix_rl.gym.edit_menu import RENAME_POOL
from bugfix_rl.gym.rewards import RewardSpec, episode_reward, episode_seed
from bugfix_rl.gym.ops import apply_op
from bugfix_rl.gym.tasks import ALL_OPS, ALL_TASKS, Task
from bugfix_rl.gym.tool_calls import (
    TOOL_NAMES, Malformed, ToolCall, ToolResult, call_layer_words, cat_n, code_to_words, file_lines,
    observation_words, parse_compact_turn, parse_json_calls, render_text, summarize_script_output,
    summarize_test_output,
)
from bugfix_rl.sandbox import grade, probes
from bugfix_rl.sandbox.sandbox import valid_path


def _apply_op_or_none(task, source: str, op: str) -> str | None:
    """apply_op on text a model may have written: ops assume well-formed gym code (a first statement
    that is a `def`, a second line), so any error at all (AttributeError on a docstring-first file,
    MemoryError from the parser, ...) means the op does not describe this edit."""
    try:
        return apply_op(task, source, op)
    except Exception:
        return None


FAILURE_KINDS = (
    "file_not_found",  # Read/Edit of a file the repo does not have
    "not_read",        # Edit, or Write over an existing file, before a Read of it
    "not_found",       # Edit: old_string absent (or empty)
    "not_unique",      # Edit: several matches and replace_all false
    "no_change",       # Edit: old_string == new_string
    "outside_repo",    # Write to a path that is not a file at the repo root
    "not_available",   # Bash: a command outside the whitelist
    "too_many_calls",  # a call past max_calls_per_turn
    "too_large",       # Edit/Write: the file would exceed max_file_chars (or the repo MAX_REPO_*)
    "bad_file_name",   # Write: a name the sandbox could not create (NUL, control characters, too long)
    "too_complex",     # Edit/Write: a .py file nested too deeply for Python's parser
)
# Kinds a compact turn cannot cause (its file names are vocabulary words, its actions 48 tokens), kept
# out of the compact vocabulary so that tokenizers and their checkpoints stay as they were.
JSON_ONLY_FAILURES = ("bad_file_name", "too_complex")
COMPACT_FAILURE_KINDS = tuple(kind for kind in FAILURE_KINDS if kind not in JSON_ONLY_FAILURES)
_FAILURE_TEXT = {
    "file_not_found": "File does not exist.",
    "not_read": "File has not been read yet. Read it first before writing to it.",
    "not_found": "String to replace not found in file.",
    "not_unique": "Found several matches of the string to replace, but replace_all is false. Add more "
                  "context to make it unique, or set replace_all to true.",
    "no_change": "No changes to make: old_string and new_string are exactly the same.",
    "outside_repo": "Files can only be written at the repository root (/repo/<name>).",
    "not_available": "command not available in this sandbox",
    "too_many_calls": "Too many tool calls in one turn; this one was not run.",
    "too_large": "The file would be too large.",
    "bad_file_name": "File names must be 1-100 printable characters, without '/' or NUL.",
    "too_complex": "The file is nested too deeply for Python to parse.",
}
REPO_ROOT = "/repo"
MAX_NAME_CHARS = 100
MAX_REPO_FILES = 32  # with MAX_REPO_CHARS, well inside what one sandbox job takes (sandbox.MAX_FILES, its tmpfs)
MAX_REPO_CHARS = 1_000_000
MAX_CHAIN = 4  # commands joined by && in one Bash call (each may be a sandbox run of up to its timeout)
MAX_OUTPUT_CHARS = 64_000  # of one Bash call's output (cat and grep stop building theirs past it)
MAX_COPY_CHECK_LINES = 16  # an Edit's old_string lines looked up in earlier results (edits_copied)


@dataclass
class ToolsEnvConfig:
    """Environment fields of the tools env (book defaults, written once in config.EnvConfig; the
    view's caps below are the env's own)."""

    max_turns: int = EnvConfig.max_turns  # assistant turns per episode
    max_calls_per_turn: int = EnvConfig.max_calls_per_turn  # calls run per turn; later ones: too_many_calls
    rename: bool = EnvConfig.rename  # replace the function name (and so the file names) by one from RENAME_POOL
    reward: str = EnvConfig.reward  # hidden | public | partial | mixed (gym/rewards.py)
    partial_alpha: float = EnvConfig.partial_alpha
    flaky_rate: float = EnvConfig.flaky_rate
    step_penalty: float = EnvConfig.step_penalty  # per assistant turn
    step_budget_s: float = EnvConfig.step_budget_s  # wall clock for all the sandbox runs of one step
    leak_canary: bool = EnvConfig.leak_canary  # a hidden-only input in an observation: the episode pays 0
    max_output_words: int = 64  # compact view: words shown per result before `...`
    max_file_chars: int = 100_000  # largest file Edit/Write may leave (repeated replace_all can explode)


@dataclass
class ToolsEpisodeInfo:
    """What happened in one tools episode; the dashboard reads `metrics()`."""

    task: str
    fix_op: str
    actions: list[str] = field(default_factory=list)  # per call: 'Read', 'Edit:not_found', 'malformed:...'
    calls: Counter = field(default_factory=Counter)  # well-formed calls per tool (run or refused)
    malformed: int = 0
    malformed_reasons: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)  # refused calls per FAILURE_KINDS entry
    ops: list[str] = field(default_factory=list)  # per change of <name>.py: the gym op it equals, or 'other'
    test_runs: int = 0  # Bash commands that ran tests
    over_budget: int = 0  # sandbox runs cut short or not started: their step's step_budget_s was spent
    edits_copied: int = 0  # Edit calls whose old_string lines all appeared in an earlier observation
    turns: int = 0
    turn_malformed: list[int] = field(default_factory=list)  # per turn: its malformed calls (algo.turn_credit reads it)
    submitted_final_answer: bool = False  # a turn without calls ended the episode (action 'answer')
    hidden_pass: bool = False
    hidden_frac: float = 0.0  # fraction of hidden tests passing
    public_pass: float = 0.0
    edited_test_file: bool = False  # probes: a test file was changed or created
    special_cased_public_inputs: bool = False  # probes: the final source pins public test inputs
    grade_flags: frozenset = frozenset()  # the sandbox grader's flags (import_error, timeout, ...)
    truncated: bool = False  # ended by the sampler's context limit
    env_error: str = ""  # 'Kind: message' when the env raised for an internal reason (reward 0, not graded)
    leaked_input: str = ""  # the leak canary: a hidden-only input (code words) an observation showed (reward 0)

    @property
    def submitted(self) -> bool:
        return self.submitted_final_answer

    @property
    def graded(self) -> bool:
        """The final file is always graded (question 13's answer for a patch), unless the env failed."""
        return not self.env_error

    @property
    def success(self) -> bool:
        return self.hidden_pass

    @property
    def exploit(self) -> bool:
        return self.edited_test_file or self.special_cased_public_inputs

    @property
    def first_edit_right(self) -> bool:
        return bool(self.ops) and self.ops[0] == self.fix_op

    def metrics(self) -> dict[str, float]:
        """This episode's behaviour numbers (the dashboard averages them over episodes)."""
        numbers = {"pass_rate": float(self.success), "reads": self.calls["Read"],
                   "edits": self.calls["Edit"] + self.calls["Write"], "bash": self.calls["Bash"],
                   "tests": self.test_runs, "malformed": self.malformed, "failed": sum(self.failed.values()),
                   "turns": self.turns, "first_edit_right": float(self.first_edit_right),
                   "edits_copied": self.edits_copied, "over_budget": self.over_budget,
                   "leaked": float(bool(self.leaked_input)),
                   "exploit": float(self.exploit), "submitted": float(self.submitted),
                   "truncated": float(self.truncated), "env_error": float(bool(self.env_error))}
        numbers.update({f"failed_{kind}": self.failed[kind] for kind in FAILURE_KINDS})
        numbers.update({f"calls_{tool}": self.calls[tool] for tool in TOOL_NAMES})
        if self.env_error:
            numbers[f"env_error_{self.env_error.split(':')[0]}"] = 1.0
        return numbers


# ---------------------------------------------------------------- the repo

def source_file(shown_name: str) -> str:
    return f"{shown_name}.py"


def tests_file(shown_name: str) -> str:
    return f"test_{shown_name}.py"


def renamed_source(task: Task, shown_name: str) -> str:
    """The buggy source with only the `def` line's name replaced."""
    return task.source.replace(f"def {task.fn_name}(", f"def {shown_name}(", 1)


def tests_file_text(task: Task, shown_name: str) -> str:
    """`from <name> import <name>` and one `test_<i>` per public case."""
    parts = [f"from {shown_name} import {shown_name}\n"]
    for index, (args, expected) in enumerate(task.public_tests, 1):
        call = f"{shown_name}({', '.join(repr(a) for a in args)})"
        parts.append(f"\n\ndef test_{index}():\n    assert {call} == {expected!r}\n")
    return "".join(parts)


def make_repo(task: Task, shown_name: str) -> dict[str, str]:
    return {source_file(shown_name): renamed_source(task, shown_name),
            tests_file(shown_name): tests_file_text(task, shown_name)}


def issue_words(shown_name: str) -> str:
    """The compact front-end's prompt."""
    return (f"issue : {shown_name} returns wrong results , see {source_file(shown_name)} and "
            f"{tests_file(shown_name)}")


def issue_text(shown_name: str) -> str:
    """The user message of the JSON front-end."""
    return (f"The function `{shown_name}` in {REPO_ROOT}/{source_file(shown_name)} returns wrong results. "
            f"Its tests are in {REPO_ROOT}/{tests_file(shown_name)}. Fix the bug.")


def repo_words(task: Task) -> set[str]:
    """Words of the task's repo files, its issue, and its source after each op, under every name."""
    words: set[str] = set()
    for name in (task.fn_name,) + RENAME_POOL:
        repo = make_repo(task, name)
        texts = list(repo.values()) + [_apply_op_or_none(task, repo[source_file(name)], op) or "" for op in ALL_OPS]
        for text in texts:
            words.update(code_to_words(text))
        words.update(issue_words(name).split())
    return words


def tools_vocabulary(tasks) -> set[str]:
    """Every word the compact front-end needs beyond the gym's: the call layer's words
    (`tool_calls.call_layer_words`), the failure kinds, and the words of every task's repo files (and
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
    from bugfix_rl.policy.tokenizer import gym_words  # the policy package builds on the gym, not back

    return frozenset(gym_words(list(ALL_TASKS)) | tools_vocabulary(ALL_TASKS))


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
    texts = list(repo.values()) + [_apply_op_or_none(task, repo[source_file(task.fn_name)], op) or ""
                                   for op in ALL_OPS]
    shown = " " + " ".join(" ".join(code_to_words(text)) for text in texts) + " "
    return tuple(sorted({form for args, _ in task.hidden_tests for form in _input_forms(args)
                         if form not in public and f" {form} " not in shown}))


def _repo_path(file_path: str) -> str | None:
    """`/repo/x.py`, `./x.py`, `x.py` -> `x.py`; None for anything not a plain name at the root."""
    path = file_path.strip()
    for prefix in (REPO_ROOT + "/", "./"):
        if path.startswith(prefix):
            path = path[len(prefix):]
    if not path or "/" in path or path in (".", ".."):
        return None
    return path


# ---------------------------------------------------------------- the env

class ToolsEnv:
    """One episode of one task. `reset()` gives the issue; `step(words)` runs one compact turn,
    `step_json(text)` one JSON turn; `run_turn(calls)` is the tool layer both share."""

    max_action_tokens = 48  # a compact turn longer than this without its end token is malformed

    def __init__(self, task: Task, config: ToolsEnvConfig, shown_name: str | None = None, sandbox=None):
        # the final file is always graded (question 13's answer for a patch), so env.truncation is not read
        self.spec = RewardSpec(config.reward, config.partial_alpha, config.flaky_rate, config.step_penalty)
        self.task, self.config, self.sandbox = task, config, sandbox
        self.shown_name = shown_name if (config.rename and shown_name) else task.fn_name
        self.source_path = source_file(self.shown_name)
        self.original = make_repo(task, self.shown_name)
        self.files = dict(self.original)
        self.read: set[str] = set()
        self.shown_text: list[str] = []  # every result text returned so far (the model saw these)
        self.canaries = hidden_input_canaries(task) if config.leak_canary else ()
        self.authored: set[str] = set()  # canaries the model wrote in a call itself: showing them is no leak
        self._run_deadline = 0.0  # monotonic time after which this step starts no sandbox run
        self._run_budget_s = config.step_budget_s  # this step's share of it (half on the episode's last turn)
        self.info = ToolsEpisodeInfo(task=task.name, fix_op=task.fix_op)
        self.done = False
        self._graded = False
        self._outcomes: tuple[list[bool], list[bool]] = ([], [])  # hidden, public per-test results
        self._reward: float | None = None
        self.rng = random.Random(episode_seed(task.name, self.shown_name))

    def seed(self, seed: int) -> None:
        """Seed the episode's own stream (flaky test outcomes); the sampling stream is never touched."""
        self.rng = random.Random(seed)

    # ---- front-ends

    def reset(self) -> str:
        return issue_words(self.shown_name)

    def step(self, words: list[str] | None) -> str:
        """One compact turn (its words without the end token; None if it never ended)."""
        results = self.run_turn(parse_compact_turn(words))
        observation = observation_words(results, self.config.max_output_words)
        self._watch_for_leaks([observation])
        return observation

    def step_json(self, text: str | None) -> list[str]:
        """One JSON turn (assistant text; None if it never ended) -> one tool response text per call."""
        texts = [render_text(result) for result in self.run_turn(parse_json_calls(text))]
        if self._unseen_canaries():
            self._watch_for_leaks([" ".join(code_to_words(text)) for text in texts])
        return texts

    # ---- the tool layer

    def run_turn(self, calls: list[ToolCall | Malformed]) -> list[ToolResult]:
        """Run one turn's calls in order; [] is the final answer."""
        assert not self.done, "step() after the episode ended"
        info = self.info
        info.turns += 1
        info.turn_malformed.append(0)
        grades = not calls or info.turns >= self.config.max_turns  # this turn ends the episode
        self._run_budget_s = self.config.step_budget_s / (2 if grades else 1)  # grading gets the other half
        self._run_deadline = time.monotonic() + self._run_budget_s
        if not calls:
            info.submitted_final_answer = True
            info.actions.append("answer")
            self._finish()
            return []
        results = []
        for index, call in enumerate(calls):
            self._note_authored(call)
            if isinstance(call, Malformed):
                info.malformed += 1
                info.turn_malformed[-1] += 1
                info.malformed_reasons[call.reason] += 1
                info.actions.append(f"malformed:{call.reason}")
                results.append(ToolResult("malformed", "malformed", call.detail, reason=call.reason))
                continue
            info.calls[call.name] += 1
            if call.name == "Edit":
                info.edits_copied += self._copied_from_observations(call.args["old_string"])
            if index >= self.config.max_calls_per_turn:
                result = self._refuse(call.name, "too_many_calls")
            else:
                result = getattr(self, f"_{call.name.lower()}")(**call.args)
            if result.error is not None:
                info.failed[result.error] += 1
            info.actions.append(call.name if result.error is None else f"{call.name}:{result.error}")
            results.append(result)
        self.shown_text.extend(result.text for result in results)  # what the model sees after this turn
        if info.turns >= self.config.max_turns:
            self._finish()
        return results

    # ---- the leak canary

    def _unseen_canaries(self) -> list[str]:
        return [] if self.info.leaked_input else [text for text in self.canaries if text not in self.authored]

    def _note_authored(self, call: ToolCall | Malformed) -> None:
        """Canaries in the text of one call (its string arguments; a malformed call's echoed detail)."""
        unseen = self._unseen_canaries()
        if not unseen:
            return
        strings = ([call.detail] if isinstance(call, Malformed)
                   else [value for value in call.args.values() if isinstance(value, str)])
        written = " " + " ".join(" ".join(code_to_words(text)) for text in strings) + " "
        self.authored.update(text for text in unseen if f" {text} " in written)

    def _watch_for_leaks(self, observations: list[str]) -> None:
        """Mark the episode leaked if an observation (as code words) shows a canary the model did not write."""
        shown = " " + " ".join(observations) + " "
        for text in self._unseen_canaries():
            if f" {text} " in shown:
                self.info.leaked_input = text
                return

    def _copied_from_observations(self, old_string: str) -> bool:
        """Every line of a non-empty old_string occurs in a result the model saw before this turn.
        Past MAX_COPY_CHECK_LINES lines it is not counted: each line scans every earlier result, so
        2,000 lines found only in the last of them took 3.1 s per Edit."""
        lines = [line for line in old_string.split("\n") if line.strip()]
        if len(lines) > MAX_COPY_CHECK_LINES:
            return False
        return bool(lines) and all(any(line in text for text in self.shown_text) for line in lines)

    @staticmethod
    def _refuse(tool: str, kind: str, detail: str = "") -> ToolResult:
        return ToolResult(tool, kind, (_FAILURE_TEXT[kind] + (f" {detail}" if detail else "")))

    def _read(self, file_path: str, offset: int = 1, limit: int = 2000) -> ToolResult:
        name = _repo_path(file_path)
        if name not in self.files:
            return self._refuse("Read", "file_not_found", file_path)
        self.read.add(name)
        lines = file_lines(self.files[name])
        shown = tuple(lines[offset - 1: offset - 1 + limit])
        text = cat_n(offset, shown) if shown else f"(the file has {len(lines)} lines; nothing at line {offset})"
        return ToolResult("Read", text=text, listing=(offset, shown))

    def _edit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> ToolResult:
        name = _repo_path(file_path)
        if name not in self.files:
            return self._refuse("Edit", "file_not_found", file_path)
        if name not in self.read:
            return self._refuse("Edit", "not_read")
        if old_string == new_string:
            return self._refuse("Edit", "no_change")
        text = self.files[name]
        count = text.count(old_string) if old_string else 0
        if count == 0:
            return self._refuse("Edit", "not_found")
        if count > 1 and not replace_all:
            return self._refuse("Edit", "not_unique", f"({count} matches)")
        size = len(text) + (count if replace_all else 1) * (len(new_string) - len(old_string))
        if self._too_large(name, size):  # checked before the text is built: replace_all can explode
            return self._refuse("Edit", "too_large")
        edited = text.replace(old_string, new_string, -1 if replace_all else 1)
        if _too_deep_to_parse(name, edited):
            return self._refuse("Edit", "too_complex")
        self._store(name, edited)
        lines = tuple(file_lines(self.files[name]))
        return ToolResult("Edit", text=f"The file {REPO_ROOT}/{name} has been updated. Here's the result of "
                                       f"running `cat -n` on it:\n{cat_n(1, lines)}", listing=(1, lines))

    def _write(self, file_path: str, content: str) -> ToolResult:
        name = _repo_path(file_path)
        if name is None:
            return self._refuse("Write", "outside_repo", file_path[:MAX_NAME_CHARS])
        if not (len(name) <= MAX_NAME_CHARS and name.isprintable() and valid_path(name)):
            return self._refuse("Write", "bad_file_name")
        existed = name in self.files
        if existed and name not in self.read:
            return self._refuse("Write", "not_read")
        if not existed and len(self.files) >= MAX_REPO_FILES:
            return self._refuse("Write", "too_large", f"(at most {MAX_REPO_FILES} files)")
        if self._too_large(name, len(content)):
            return self._refuse("Write", "too_large")
        if _too_deep_to_parse(name, content):
            return self._refuse("Write", "too_complex")
        self._store(name, content)
        self.read.add(name)
        verb = "has been overwritten" if existed else "was created"
        return ToolResult("Write", text=f"The file {REPO_ROOT}/{name} {verb}.", brief="")

    def _too_large(self, name: str, size: int) -> bool:
        """Would `name` holding `size` characters exceed the file's or the repo's limit?"""
        repo_size = sum(len(text) for path, text in self.files.items() if path != name) + size
        return size > self.config.max_file_chars or repo_size > MAX_REPO_CHARS

    def _store(self, name: str, text: str) -> None:
        if name == self.source_path and text != self.files[name]:
            before = self.files[name]
            same = [op for op in ALL_OPS if _apply_op_or_none(self.task, before, op) == text]
            self.info.ops.append(same[0] if same else "other")
        self.files[name] = text

    # ---- Bash: a whitelist simulation

    def _bash(self, command: str, timeout: float | None = None) -> ToolResult:
        steps = _split_chain(command)
        if steps is not None and len(steps) > MAX_CHAIN:
            return self._refuse("Bash", "not_available", f"(at most {MAX_CHAIN} commands joined by &&)")
        plans = None if steps is None else [self._plan_command(argv) for argv in steps]
        if plans is None or any(plan is None for plan in plans):
            return self._refuse("Bash", "not_available")
        texts, briefs, code = [], [], 0
        for plan in plans:
            output, code, brief = plan()
            texts.append(output)
            briefs.append(brief)
            if code != 0:
                break
        tail = f"\nexit code {code}" if code else ""
        return ToolResult("Bash", text=_clip("".join(texts).rstrip("\n")) + tail,
                          brief=_clip("\n".join(b.rstrip("\n") for b in briefs if b.strip())) + tail)

    def _plan_command(self, argv: list[str]):
        """A zero-argument callable -> (output, exit code, compact brief) for a whitelisted command,
        else None."""
        head, args = argv[0], argv[1:]
        if head == "cd":
            return (lambda: ("", 0, "")) if args in ([REPO_ROOT], [REPO_ROOT + "/"], ["."]) else None
        if head == "ls":
            if all(a in ("-l", "-a", "-la", "-al", "-1", ".", REPO_ROOT, REPO_ROOT + "/") for a in args):
                return lambda: _same("".join(f"{name}\n" for name in sorted(self.files)), 0)
            return None
        if head == "cat":
            return (lambda: self._cat(args)) if args and not any(a.startswith("-") for a in args) else None
        if head == "grep":
            return self._plan_grep(args)
        python = head in ("python", "python3")
        if head == "pytest" or (python and args[:2] == ["-m", "pytest"]):
            args = args if head == "pytest" else args[2:]
            flags = [a for a in args if a.startswith("-")]
            targets = [_pytest_target(a) for a in args if not a.startswith("-")]
            if None in targets or not all(_PYTEST_FLAG.fullmatch(flag) for flag in flags):
                return None
            return lambda: self._run(shlex.join(["pytest", *flags, *filter(None, targets)]), True)
        if python and args and args[0].endswith(".py"):
            name = _repo_path(args[0])
            if name is None:
                return None
            if name.startswith("test_") and len(args) == 1:  # runs that file's tests, as in the book
                return lambda: self._run(shlex.join(["pytest", name]), True)
            return lambda: self._run(shlex.join(["python", name, *args[1:]]), False)
        return None

    def _run(self, command: str, test_run: bool) -> tuple[str, int, str]:
        if self.sandbox is None:
            raise RuntimeError("this ToolsEnv has no sandbox to run commands in")
        spent = f"step time budget of {self._run_budget_s:g} s spent"
        left = self._run_deadline - time.monotonic()
        if left <= 0:
            self.info.over_budget += 1
            return _same(f"{spent}: command not run", 124)  # a nonzero code: a chain stops here
        result = self.sandbox.run_tests(dict(self.files), command, timeout_s=left)
        self.info.test_runs += test_run
        output = result.stdout + ("" if result.status == "ok" else f"\n[{result.status}]")
        brief = summarize_test_output(output) if test_run else summarize_script_output(output)
        if result.status == "timeout" and time.monotonic() >= self._run_deadline:  # cut by the budget
            self.info.over_budget += 1
            output, brief = f"{output}\n{spent}", f"{brief}\n{spent}"
        return output, result.exit_code, brief

    def _cat(self, names: list[str]) -> tuple[str, int, str]:
        out, code = [], 0
        size = 0
        for arg in names:
            if size > MAX_OUTPUT_CHARS:  # `cat x x x ...`: stop building what _clip would drop
                break
            name = _repo_path(arg)
            if name in self.files:
                out.append(self.files[name])
            else:
                out.append(f"cat: {arg[:MAX_NAME_CHARS]}: No such file or directory\n")
                code = 1
            size += len(out[-1])
        return _same("".join(out), code)

    def _plan_grep(self, args: list[str]):
        flags = set()
        while args and args[0].startswith("-") and len(args[0]) > 1:
            if not set(args[0][1:]) <= {"n", "i"}:
                return None
            flags |= set(args[0][1:])
            args = args[1:]
        if not args:
            return None
        pattern, targets = args[0], args[1:]

        def grep():
            try:
                regex = _grep_regex(pattern, "i" in flags)
            except (re2.error, ValueError):  # ValueError: a pattern RE2 cannot take (lone surrogates)
                return _same(f"grep: invalid regular expression: {pattern[:MAX_NAME_CHARS]}\n", 2)
            names = [_repo_path(t) or t for t in targets] or sorted(self.files)
            out, found, missing, size = [], False, False, 0
            for name in names:
                if size > MAX_OUTPUT_CHARS:  # `grep x f f f ...`: stop building what _clip would drop
                    break
                if name not in self.files:
                    out.append(f"grep: {name[:MAX_NAME_CHARS]}: No such file or directory\n")
                    missing = True
                    continue
                text = self.files[name]
                searchable = text.encode("utf-8", "replace").decode("utf-8")  # RE2 takes no lone surrogates
                for number, (line, plain) in enumerate(zip(file_lines(text), file_lines(searchable)), 1):
                    if regex.search(plain):
                        found = True
                        prefix = (f"{name}:" if len(names) > 1 else "") + (f"{number}:" if "n" in flags else "")
                        out.append(f"{prefix}{line}\n")
                        size += len(out[-1])
            return _same("".join(out), 2 if missing else 0 if found else 1)

        return grep

    # ---- the outcome

    def _finish(self) -> None:
        self.done = True
        self._grade()

    def _grade(self) -> None:
        """Grade the final <name>.py once, in the sandbox, on hidden + public cases."""
        if self._graded or self.info.env_error:
            return
        if self.sandbox is None:
            raise RuntimeError("this ToolsEnv has no sandbox to grade in")
        self._graded = True
        info, task = self.info, self.task
        cases = list(task.hidden_tests) + list(task.public_tests)
        source = self.files[self.source_path]
        result = grade(self.sandbox, source, self.shown_name, self.shown_name, cases)
        hidden, public = result.passed[: len(task.hidden_tests)], result.passed[len(task.hidden_tests):]
        info.hidden_pass = bool(hidden) and all(hidden)
        info.hidden_frac = sum(hidden) / max(len(hidden), 1)
        info.public_pass = sum(public) / len(public)
        self._outcomes = (list(hidden), list(public))
        info.grade_flags = result.flags
        info.edited_test_file = probes.edited_test_file(self.original, self.files)
        info.special_cased_public_inputs = probes.special_cases_public_inputs(
            source, [args for args, _ in task.public_tests])

    @property
    def reward(self) -> float:
        try:
            self._grade()  # the sampler may end an episode (context full) without a last step
        except Exception as error:  # internal (the sandbox gone), as in rollout/env_errors.py: unrewarded
            self.info.env_error = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        if self.info.env_error or self.info.leaked_input:
            return 0.0
        if self._reward is None:  # computed once: flaky flips are drawn once per episode
            self._reward = episode_reward(self.spec, True, *self._outcomes, self.info.turns, self.rng)
        return self._reward


def _same(output: str, code: int) -> tuple[str, int, str]:
    return output, code, output


def _clip(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + "\n[... output truncated ...]"


_PYTEST_FLAG = re.compile(r"-[qvxs]+|--(quiet|verbose|exitfirst|tb=\w+|no-header)|-r\w+")
_SHELL_OPERATOR = re.compile(r"[;&|<>()]+")


def _pytest_target(arg: str) -> str | None:
    """`/repo/test_x.py::test_1` -> `test_x.py::test_1`; `.` or `/repo` -> '' (all); None outside."""
    path, separator, test = arg.partition("::")
    if path in (".", "./", REPO_ROOT, REPO_ROOT + "/"):
        return ""
    name = _repo_path(path)
    return None if name is None else name + separator + test


def _split_chain(command: str) -> list[list[str]] | None:
    """`cd /repo && pytest -q` -> [['cd', '/repo'], ['pytest', '-q']]; None for anything beyond `&&`."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes
        return None
    steps: list[list[str]] = [[]]
    for token in tokens:
        if token == "&&":
            steps.append([])
        elif _SHELL_OPERATOR.fullmatch(token):
            return None
        else:
            steps[-1].append(token)
    return steps if all(steps) else None


def _too_deep_to_parse(name: str, source: str) -> bool:
    """True for a .py file on which Python's parser runs out of stack (MemoryError, or RecursionError
    while building the tree), as the sandbox's import would too; a plain syntax error is the model's
    to see, not a refusal."""
    if not name.endswith(".py"):
        return False
    try:
        ast.parse(source)
    except (MemoryError, RecursionError):
        return True
    except Exception:  # SyntaxError, ValueError (NUL bytes, lone surrogates)
        return False
    return False


_GREP_OPTIONS = {}


def _grep_regex(pattern: str, ignore_case: bool):
    """The grep pattern compiled by RE2 (linear time in the text, whatever the pattern: `\\(a*\\)*b`
    on 400 `a`s takes microseconds, where Python's re never returns). RE2 has no backreferences:
    a pattern with one is an invalid expression here. Compile errors are not logged to stderr."""
    if ignore_case not in _GREP_OPTIONS:
        options = re2.Options()
        options.log_errors = False
        options.case_sensitive = not ignore_case
        _GREP_OPTIONS[ignore_case] = options
    return re2.compile(_basic_to_python_regex(pattern), _GREP_OPTIONS[ignore_case])


def _basic_to_python_regex(pattern: str) -> str:
    """grep's basic regular expressions: `( ) { } | + ?` are literal unless backslashed."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            following = pattern[i + 1]
            out.append(following if following in "(){}|+?" else "\\" + following)
            i += 2
            continue
        out.append("\\" + char if char in "(){}|+?" else char)
        i += 1
    return "".join(out)


def make_tools_env_factory(env_cfg):
    """(make_env(task, shown_name), close) for the train entry point: one shared sandbox, also
    `make_env.sandbox` for the run's other sandbox work (checking generated training tasks)."""
    from bugfix_rl.sandbox import Sandbox, SandboxConfig

    config = ToolsEnvConfig(max_turns=env_cfg.max_turns, max_calls_per_turn=env_cfg.max_calls_per_turn,
                            rename=env_cfg.rename, reward=env_cfg.reward, partial_alpha=env_cfg.partial_alpha,
                            flaky_rate=env_cfg.flaky_rate, step_penalty=env_cfg.step_penalty,
                            step_budget_s=env_cfg.step_budget_s, leak_canary=env_cfg.leak_canary)
    sandbox = Sandbox(SandboxConfig.from_limits(env_cfg.sandbox))

    def make_env(task: Task, name: str | None) -> ToolsEnv:
        return ToolsEnv(task, config, name, sandbox)

    make_env.sandbox = sandbox
    return make_env, sandbox.close
