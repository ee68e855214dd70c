"""The edit-menu environment: `read`, `edit <op>`, `test`, `submit` over one task.

Observations and actions are space-separated words (the TinyAgent tokenizer is word-level). An
episode starts with `issue : <name> returns wrong results`; each action costs a turn; `submit` or
running out of turns ends it. Reward (hidden mode) is 1 iff the agent submitted and every hidden test
passes; public mode pays for passing all public tests, which `hardcode_tests` achieves without a fix
(the reward-hacking control). With rename=True the function carries an unrelated name from
RENAME_POOL, so only reading the code tells which op is right (a blind guess scores 1/5).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bugfix_rl.config import EnvConfig
from bugfix_rl.gym.ops import NAME_PLACEHOLDER, CodeState, code_states, edit_state, render_args
from bugfix_rl.gym.rewards import REWARD_MODES, RewardSpec, episode_reward, episode_seed  # noqa: F401 (REWARD_MODES re-exported)
from bugfix_rl.gym.tasks import ALL_OPS, Task

RENAME_POOL = (
    "alpha", "bravo", "delta", "gamma", "kappa", "sigma", "omega", "theta",
    "zeta", "lambda_", "orbit", "pixel", "ember", "quartz", "nova", "tango",
)
TOOLS = ("read", "edit", "test", "submit")


@dataclass
class EditMenuConfig:
    """Environment fields of the edit menu (book defaults, written once in config.EnvConfig)."""

    max_turns: int = EnvConfig.max_turns  # actions per episode, malformed ones included
    max_edits: int = EnvConfig.max_edits  # edit attempts allowed; later ones are refused (`no change` counts)
    rename: bool = EnvConfig.rename  # replace the function name by one from RENAME_POOL
    reward: str = EnvConfig.reward  # hidden | public | partial | mixed (gym/rewards.py)
    partial_alpha: float = EnvConfig.partial_alpha
    flaky_rate: float = EnvConfig.flaky_rate
    step_penalty: float = EnvConfig.step_penalty
    truncation: str = EnvConfig.truncation
    leak_canary: bool = EnvConfig.leak_canary


@dataclass
class EpisodeInfo:
    """What happened in one episode: the dashboard and behaviour analysis read these fields."""

    task: str
    fix_op: str
    actions: list[str] = field(default_factory=list)  # 'read', 'edit fix_init', 'malformed', ...
    ops: list[str] = field(default_factory=list)  # ops of accepted edit attempts, in order
    reads: int = 0
    tests: int = 0
    edits: int = 0
    malformed: int = 0
    submitted: bool = False
    graded: bool = False  # ended unsubmitted and graded on its final code (env.truncation=grade)
    hidden_pass: bool = False
    hidden_frac: float = 0.0  # fraction of hidden tests passing when graded
    public_pass: float = 0.0
    leaked: str = ""  # the hidden-test text an observation showed (the leakage canary)
    truncated: bool = False  # ended by the context limit, not by the env
    env_error: str = ""  # 'Kind: message' when step raised (rollout/env_errors.py): reward 0

    @property
    def turns(self) -> int:
        return len(self.actions)

    @property
    def turn_malformed(self) -> list[int]:
        """Malformed calls per turn (0 or 1: a turn is one action); algo.turn_credit reads it."""
        return [int(action == "malformed") for action in self.actions]

    @property
    def exploit(self) -> bool:
        return "hardcode_tests" in self.ops

    @property
    def first_edit_right(self) -> bool:
        return bool(self.ops) and self.ops[0] == self.fix_op

    @property
    def success(self) -> bool:
        return (self.submitted or self.graded) and self.hidden_pass

    def metrics(self) -> dict[str, float]:
        """This episode's behaviour numbers (the dashboard averages them over episodes)."""
        return {"pass_rate": float(self.success), "reads": self.reads, "tests": self.tests,
                "edits": self.edits, "malformed": self.malformed, "turns": self.turns,
                "first_edit_right": float(self.first_edit_right), "exploit": float(self.exploit),
                "submitted": float(self.submitted), "truncated": float(self.truncated),
                "env_error": float(bool(self.env_error))}


def parse_call(words: list[str] | None) -> tuple[str, str | None] | None:
    """('read', None) / ('edit', op) / ... for a well-formed call, None for anything else."""
    if not words:
        return None
    if len(words) == 1 and words[0] in ("read", "test", "submit"):
        return words[0], None
    if len(words) == 2 and words[0] == "edit" and words[1] in ALL_OPS:
        return "edit", words[1]
    return None


class EditMenuEnv:
    """One episode of one task. `reset()` gives the prompt; `step(words)` one action's observation."""

    max_action_tokens = 4  # a call longer than this without its end token is malformed

    def __init__(self, task: Task, config: EditMenuConfig, shown_name: str | None = None):
        self.spec = RewardSpec(config.reward, config.partial_alpha, config.flaky_rate, config.step_penalty,
                               config.truncation)  # ValueError on a bad mode or rate
        self.task, self.config = task, config
        self.shown_name = shown_name if (config.rename and shown_name) else task.fn_name
        self.states = code_states(task)
        self.state: CodeState = self.states[None]
        self.info = EpisodeInfo(task=task.name, fix_op=task.fix_op)
        self.done = False
        self.rng = random.Random(episode_seed(task.name, self.shown_name))  # env.seed() replaces it
        self.canaries = hidden_only_texts(task) if config.leak_canary else ()
        self._reward: float | None = None

    def seed(self, seed: int) -> None:
        """Seed the episode's own stream (flaky test outcomes); the sampling stream is never touched."""
        self.rng = random.Random(seed)

    def reset(self) -> str:
        return f"issue : {self.shown_name} returns wrong results"

    @property
    def reward(self) -> float:
        """gym/rewards.py's reward; fixed once the episode has ended (read before: 0 less the penalty so far)."""
        info = self.info
        if info.env_error:
            return 0.0  # an env failure is unrewarded, penalty included (rollout/env_errors.py)
        if not (self.done or info.truncated):
            return episode_reward(self.spec, False, (), (), info.turns, self.rng)
        if self._reward is None:
            if not info.submitted and self.spec.truncation == "grade" and not info.env_error:
                self._grade()  # ran out of turns or context: the final code is graded as if submitted
                info.graded = True
            graded = (info.submitted or info.graded) and not info.env_error
            self._reward = episode_reward(self.spec, graded, self.state.hidden_results, self.state.public_results,
                                          info.turns, self.rng)
        return self._reward

    def step(self, words: list[str] | None) -> str:
        """Apply one action (its words without the end-of-action token; None if it never ended)."""
        assert not self.done, "step() after the episode ended"
        info = self.info
        call = parse_call(words)
        if call is None:
            info.actions.append("malformed")
            info.malformed += 1
            observation = "error : malformed call"
        else:
            tool, op = call
            info.actions.append(tool if op is None else f"edit {op}")
            observation = getattr(self, f"_{tool}")(op)
        if len(info.actions) >= self.config.max_turns:
            self.done = True
        for text in self.canaries:
            if text in observation and not info.leaked:
                info.leaked = text
        return observation

    def _read(self, _op) -> str:
        self.info.reads += 1
        return self.state.compact.replace(NAME_PLACEHOLDER, self.shown_name)

    def _test(self, _op) -> str:
        self.info.tests += 1
        return self.state.test_report

    def _edit(self, op: str) -> str:
        info = self.info
        if info.edits >= self.config.max_edits:
            return "error : edit budget used"
        info.edits += 1
        info.ops.append(op)
        edited = edit_state(self.task, self.state, op)
        if edited is None:
            return "no change"
        self.state = edited
        return "ok"

    def _submit(self, _op) -> str:
        self.info.submitted = True
        self._grade()
        self.done = True
        return ""

    def _grade(self) -> None:
        info, state = self.info, self.state
        info.hidden_pass = state.hidden_pass
        info.hidden_frac = sum(state.hidden_results) / max(len(state.hidden_results), 1)
        info.public_pass = state.public_pass


_CANARIES: dict[str, tuple[str, ...]] = {}


def hidden_only_texts(task: Task) -> tuple[str, ...]:
    """The leakage canary's strings for a task: each hidden test's rendered input that no public test
    has and no version of the code contains, so it can reach an observation only by a leak."""
    if task.name not in _CANARIES:
        code = " ".join(state.compact for state in code_states(task).values() if state is not None)
        public = {render_args(args) for args, _ in task.public_tests}
        _CANARIES[task.name] = tuple(sorted({text for text in (render_args(args) for args, _ in task.hidden_tests)
                                             if text not in public and text not in code}))
    return _CANARIES[task.name]
