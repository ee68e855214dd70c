"""Flaky rewards measured and voted down (design-review question 9; issue 39).

`env.flaky_rate` (gym/rewards.py) flips each test outcome behind the reward. Two more knobs act on the
reward itself, outside the gym, through a subclass of the env (`regraded_env_class`, wired by envs.py):

- `env.reward_flip_rate` f: each grading's verdict flips (1 <-> 0) with probability f, from the
  episode's own seeded stream (the expected binary reward becomes f + (1 - 2f) p).
- `env.grade_reruns` k (odd): the final state is graded k times, each grading with fresh per-test flips
  (flaky_rate) and a fresh verdict flip (reward_flip_rate), and the reward is the majority verdict.
  With independent flips at rate e per grading, the majority is wrong with probability
  sum_{j > k/2} C(k, j) e^j (1 - e)^(k - j) (`majority_error`): 3 reruns take e = 0.1 to 0.028.

A rerun also measures the noise: per episode, the share of its k verdicts that agree with the majority
(`grade_agreement`), and per test the share of rerun pairs that disagree, c (k - c) / C(k, 2) for c
passes in k (unbiased for 2 e_t (1 - e_t)), from which `test_flake_rate` = (1 - sqrt(1 - 2 d)) / 2
estimates the per-test flip rate (`flake_rate_from_disagreement`). The trainer logs both per step
(`grading_metrics`). Success (pass rates, evaluation) keeps the true outcomes, as with flaky_rate.

Only the binary rewards (env.reward hidden or public) have a verdict to flip; config.validate refuses
the knobs with partial or mixed. Defaults (0 and 1) leave the gym's reward as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bugfix_rl.gym.rewards import base_reward, flipped


@dataclass(frozen=True)
class Regrade:
    """env.reward_flip_rate and env.grade_reruns (config.EnvConfig has the defaults)."""

    reward_flip_rate: float = 0.0
    reruns: int = 1

    @property
    def active(self) -> bool:
        return self.reward_flip_rate > 0 or self.reruns > 1


def majority(verdicts: list[float]) -> float:
    """1.0 if more than half the verdicts are 1, else 0.0 (k odd: no tie)."""
    return float(sum(verdicts) * 2 > len(verdicts))


def majority_error(error: float, k: int) -> float:
    """P(the majority of k independent verdicts is wrong), each wrong with probability `error`."""
    return sum(math.comb(k, j) * error ** j * (1 - error) ** (k - j) for j in range(k // 2 + 1, k + 1))


def pair_disagreement(passes: int, k: int) -> float:
    """The share of the C(k, 2) pairs of k reruns that disagree, with `passes` of them passing."""
    return passes * (k - passes) / math.comb(k, 2)


def flake_rate_from_disagreement(disagreement: float) -> float:
    """The flip rate e with 2 e (1 - e) = disagreement, e in [0, 0.5]."""
    return (1 - math.sqrt(max(0.0, 1 - 2 * disagreement))) / 2


def graded_rewards(spec, hidden, public, regrade: Regrade, rng, first: float | None = None) -> tuple[list[float], list[int]]:
    """(k verdicts, passes per test over the k gradings) of one final state. With one grading, `first`
    (the gym's verdict, its per-test flips already drawn) is the grading and only the verdict flip is
    drawn; with k > 1 every grading draws its own per-test flips."""
    outcomes = list(hidden) + list(public)
    passes = [0] * len(outcomes)
    verdicts = []
    for _ in range(regrade.reruns):
        if regrade.reruns == 1 and first is not None:
            verdict = first
        else:
            h, p = flipped(hidden, spec.flaky_rate, rng), flipped(public, spec.flaky_rate, rng)
            verdict = base_reward(spec.mode, h, p, spec.partial_alpha)
            passes = [c + int(o) for c, o in zip(passes, h + p)]
        if regrade.reward_flip_rate > 0 and rng.random() < regrade.reward_flip_rate:
            verdict = 1.0 - verdict
        verdicts.append(verdict)
    return verdicts, passes


def regraded_env_class(env_class: type) -> type:
    """A subclass of an env class (EditMenuEnv or ToolsEnv) whose final reward is regraded as this
    module says; its instances need `regrade` (a Regrade). The per-episode record lands on the info:
    grade_verdicts (the k verdicts) and grade_test_passes (passes per test over the k gradings)."""

    class Regraded(env_class):
        regrade = Regrade()

        @property
        def reward(self) -> float:
            reward = super().reward
            if self._reward is None:  # not final, or unrewarded by an env failure: nothing to grade
                return reward
            if getattr(self, "_regraded", None) is None:
                self._regraded = self._regrade(reward)
            return self._regraded

        def _regrade(self, reward: float) -> float:
            info = self.info
            outcomes = self._final_outcomes()
            if outcomes is None:  # ended ungraded (edit menu, truncation=zero): no verdict to flip
                return reward
            penalty = self.spec.step_penalty * info.turns
            verdicts, passes = graded_rewards(self.spec, *outcomes, self.regrade, self.rng, first=reward + penalty)
            info.grade_verdicts, info.grade_test_passes = verdicts, passes
            self._reward = majority(verdicts) - penalty
            return self._reward

        def _final_outcomes(self):
            if hasattr(self, "_outcomes"):  # the tools env: (hidden, public) of its one grading
                return self._outcomes
            if (self.info.submitted or self.info.graded) and not self.info.env_error:
                return self.state.hidden_results, self.state.public_results
            return None

    Regraded.__name__ = Regraded.__qualname__ = f"Regraded{env_class.__name__}"
    return Regraded


def grading_metrics(trajectories) -> dict:
    """Dashboard keys of the regrading, over the step's episodes that were graded: grade_agreement (mean
    share of an episode's k verdicts equal to their majority) and test_flake_rate (the per-test flip
    rate implied by the tests' pair disagreement over the reruns); None where k = 1 or nothing was graded."""
    infos = [t.info for t in trajectories if getattr(t.info, "grade_verdicts", None)]
    k = len(infos[0].grade_verdicts) if infos else 0
    if k < 2:
        return {"grade_agreement": None, "test_flake_rate": None}
    agreement = [sum(v == majority(i.grade_verdicts) for v in i.grade_verdicts) / k for i in infos]
    tests = [pair_disagreement(c, k) for i in infos for c in i.grade_test_passes]
    return {"grade_agreement": sum(agreement) / len(agreement),
            "test_flake_rate": flake_rate_from_disagreement(sum(tests) / len(tests)) if tests else None}
