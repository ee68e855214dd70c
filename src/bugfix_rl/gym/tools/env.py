"""The Claude-Code tools environment (`env=tools`): Read, Edit, Write, Bash over an in-memory repo.

This module is the env's semantics: turns, the step's time budget, the leak canary's watch, grading
and the reward. It executes `ToolCall`s and returns `ToolResult`s (`calls.py`), and never sees model
text: `syntax_compact.py` (TinyAgent's words) and `syntax_json.py` (Qwen3's `<tool_call>` blocks) parse
turns, `render.py` shows results back. The tools themselves are `repo.py` (the episode's files: Read,
Edit, Write) and `shell.py` (the Bash subset).

Semantics (SPEC §2), with the choices made here:
- A turn is up to `max_calls_per_turn` calls, run in order; every call after that (malformed ones
  count toward the limit too) is refused with `too_many_calls`. A turn with no call is the final
  answer and ends the episode; otherwise it ends after `max_turns` turns.
- Malformed calls (unparseable / schema mismatch, `calls.MALFORMED_REASONS`) and failed calls
  (refused by a tool, `calls.FAILURE_KINDS`) are counted apart; both give an error result and use the turn.
- Time: per-run limits would add up within one step (a Bash call chains up to MAX_CHAIN runs, a turn
  holds max_calls_per_turn calls), so all the sandbox runs of one `step` share `step_budget_s` of wall
  clock: each run's limit is cut to what is left, and once it is spent a run is not started; either
  way its output says `step time budget of N s spent` and the episode goes on. On the turn that ends
  the episode the runs get half the budget, and grading (one job, within its own limit) the rest.
- Leak canary (`leak_canary`): a hidden-only input of the task (`leaks.hidden_input_canaries`) that
  shows up in an observation, and that the model had not written itself in one of its calls, marks the
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

import random
import time
from collections import Counter
from dataclasses import dataclass, field

from bugfix_rl.config import EnvConfig
from bugfix_rl.gym.rewards import RewardSpec, episode_reward, episode_seed
from bugfix_rl.gym.tasks import ALL_OPS, Task
from bugfix_rl.gym.tools.calls import FAILURE_KINDS, TOOL_NAMES, Malformed, ToolCall, ToolResult, refusal
from bugfix_rl.gym.tools.code_words import code_to_words
from bugfix_rl.gym.tools.leaks import hidden_input_canaries
from bugfix_rl.gym.tools.render import observation_words, render_text, summarize_script_output, summarize_test_output
from bugfix_rl.gym.tools.repo import Repo, apply_op_or_none, issue_words, make_repo, source_file
from bugfix_rl.gym.tools.shell import Shell, same_brief
from bugfix_rl.gym.tools.syntax_compact import parse_compact_turn
from bugfix_rl.gym.tools.syntax_json import parse_json_calls
from bugfix_rl.sandbox import grade, probes

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
    guide_old_string: bool = EnvConfig.guide_old_string  # the word sampler guides an Edit's old_string (policy/guided_edits.py)
    check_edit_syntax: bool = EnvConfig.check_edit_syntax  # refuse an Edit that breaks a .py file's syntax (repo.py)
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
        self.repo = Repo(self.original, config.max_file_chars, self._note_source_change, config.check_edit_syntax)
        self.shell = Shell(self.repo.files, self._run)
        self._tools = {"Read": self.repo.read_file, "Edit": self.repo.edit_file, "Write": self.repo.write_file,
                       "Bash": self.shell.bash}
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

    @property
    def guide_old_string(self) -> bool:
        """Whether the sampler holds this episode's Edits' old_string to whole listed lines (rollout/sampler.py)."""
        return self.config.guide_old_string

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
                result = refusal(call.name, "too_many_calls")
            else:
                result = self._tools[call.name](**call.args)
            if result.error is not None:
                info.failed[result.error] += 1
            info.actions.append(call.name if result.error is None else f"{call.name}:{result.error}")
            results.append(result)
        self.shown_text.extend(result.text for result in results)  # what the model sees after this turn
        if info.turns >= self.config.max_turns:
            self._finish()
        return results

    # ---- the repo

    @property
    def files(self) -> dict[str, str]:
        """The repo's files now (name -> text)."""
        return self.repo.files

    @property
    def read(self) -> set[str]:
        """The names of the files the model has read."""
        return self.repo.read

    def _note_source_change(self, name: str, text: str) -> None:
        """Before a tool stores `text` as `name`: a change of <name>.py goes into info.ops as the gym op
        it equals, or 'other'."""
        if name == self.source_path and text != self.files[name]:
            before = self.files[name]
            same = [op for op in ALL_OPS if apply_op_or_none(self.task, before, op) == text]
            self.info.ops.append(same[0] if same else "other")

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

    # ---- sandbox runs under the step's budget

    def _run(self, command: str, test_run: bool) -> tuple[str, int, str]:
        if self.sandbox is None:
            raise RuntimeError("this ToolsEnv has no sandbox to run commands in")
        spent = f"step time budget of {self._run_budget_s:g} s spent"
        left = self._run_deadline - time.monotonic()
        if left <= 0:
            self.info.over_budget += 1
            return same_brief(f"{spent}: command not run", 124)  # a nonzero code: a chain stops here
        result = self.sandbox.run_tests(dict(self.files), command, timeout_s=left)
        self.info.test_runs += test_run
        output = result.stdout + ("" if result.status == "ok" else f"\n[{result.status}]")
        brief = summarize_test_output(output) if test_run else summarize_script_output(output)
        if result.status == "timeout" and time.monotonic() >= self._run_deadline:  # cut by the budget
            self.info.over_budget += 1
            output, brief = f"{output}\n{spent}", f"{brief}\n{spent}"
        return output, result.exit_code, brief

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


def make_tools_env_factory(env_cfg, check_edit_syntax: bool | None = None):
    """(make_env(task, shown_name), close) for the train entry point: one shared sandbox, also
    `make_env.sandbox` for the run's other sandbox work (checking generated training tasks);
    check_edit_syntax, when given, in place of env_cfg's."""
    from bugfix_rl.sandbox import Sandbox, SandboxConfig

    if check_edit_syntax is None:
        check_edit_syntax = env_cfg.check_edit_syntax
    config = ToolsEnvConfig(max_turns=env_cfg.max_turns, max_calls_per_turn=env_cfg.max_calls_per_turn,
                            rename=env_cfg.rename, reward=env_cfg.reward, partial_alpha=env_cfg.partial_alpha,
                            flaky_rate=env_cfg.flaky_rate, step_penalty=env_cfg.step_penalty,
                            step_budget_s=env_cfg.step_budget_s, leak_canary=env_cfg.leak_canary,
                            guide_old_string=env_cfg.guide_old_string,
                            check_edit_syntax=check_edit_syntax)
    sandbox = Sandbox(SandboxConfig.from_limits(env_cfg.sandbox))

    def make_env(task: Task, name: str | None) -> ToolsEnv:
        return ToolsEnv(task, config, name, sandbox)

    make_env.sandbox = sandbox
    return make_env, sandbox.close
