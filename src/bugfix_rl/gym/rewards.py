"""The episode reward and its switches (design-review questions 8, 9, 12 and 13), shared by both envs.

    reward = base(mode, outcomes) - step_penalty * turns        (0 + penalty when the episode is not graded)

- mode `hidden` (default): 1 iff every hidden test passes; `public`: 1 iff every public test passes
  (the hackable reward); `partial`: the fraction of hidden tests passed (q8: dense, but it moves the
  optimum to fixing the easy cases and stopping); `mixed`: 1[all hidden pass] + alpha * fraction, with
  a small alpha so full success dominates.
- `flaky_rate` f (q9): each test outcome behind the reward flips with probability f, independently,
  from the episode's own seeded stream. The expected binary reward becomes f + (1 - 2f) p for a
  one-test verdict, so the gradient shrinks; success (pass rate, evaluation) keeps the true outcomes.
- `step_penalty` (q12): subtracted per turn, success or not; too high and an immediate submit pays best.
- `truncation` (q13): an episode that ends without a submit (turn budget or context limit) is paid 0
  (`zero`, default) or graded on its final code as if submitted (`grade`, which also counts as a
  success when the hidden tests pass: the deployed artefact is the patch, not the submit).
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

REWARD_MODES = ("hidden", "public", "partial", "mixed")
TRUNCATION_MODES = ("zero", "grade")


@dataclass(frozen=True)
class RewardSpec:
    """The reward fields of config.EnvConfig (defaults there)."""

    mode: str = "hidden"
    partial_alpha: float = 0.1
    flaky_rate: float = 0.0
    step_penalty: float = 0.0
    truncation: str = "zero"

    def __post_init__(self):
        if self.mode not in REWARD_MODES:
            raise ValueError(f"unknown reward {self.mode!r}; valid: {', '.join(REWARD_MODES)}")
        if self.truncation not in TRUNCATION_MODES:
            raise ValueError(f"unknown truncation {self.truncation!r}; valid: {', '.join(TRUNCATION_MODES)}")
        if not 0.0 <= self.flaky_rate <= 0.5:
            raise ValueError(f"flaky_rate={self.flaky_rate} must lie in [0, 0.5]")
        if not (math.isfinite(self.step_penalty) and math.isfinite(self.partial_alpha)) \
                or self.step_penalty < 0 or self.partial_alpha < 0:
            raise ValueError("step_penalty and partial_alpha must be finite and >= 0")


def episode_seed(*parts) -> int:
    """A stable 32-bit seed from strings and ints (crc32; Python's hash() is salted per process)."""
    return zlib.crc32("/".join(map(str, parts)).encode())


def flipped(outcomes: Sequence[bool], rate: float, rng: random.Random) -> list[bool]:
    """Each outcome flipped with probability `rate`; no draws at all when rate is 0."""
    if rate <= 0:
        return [bool(o) for o in outcomes]
    return [bool(o) != (rng.random() < rate) for o in outcomes]


def base_reward(mode: str, hidden: Sequence[bool], public: Sequence[bool], alpha: float) -> float:
    """The graded reward of one final state, from per-test outcomes."""
    fraction = sum(hidden) / len(hidden) if hidden else 0.0
    all_hidden = bool(hidden) and all(hidden)
    if mode == "public":
        return float(bool(public) and all(public))
    if mode == "partial":
        return fraction
    if mode == "mixed":
        return float(all_hidden) + alpha * fraction
    return float(all_hidden)


def episode_reward(spec: RewardSpec, graded: bool, hidden: Sequence[bool], public: Sequence[bool], turns: int,
                   rng: random.Random) -> float:
    """The reward of one episode. `graded`: submitted, or ended unsubmitted under truncation=grade."""
    base = 0.0
    if graded:
        base = base_reward(spec.mode, flipped(hidden, spec.flaky_rate, rng), flipped(public, spec.flaky_rate, rng),
                           spec.partial_alpha)
    return base - spec.step_penalty * turns
