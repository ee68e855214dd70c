"""Scripted edit-menu policies: demonstrations, baselines, and the noisy behaviour the RL base clones.

A scripted policy is a fresh object per episode, called with the latest observation text and
returning the next action's words.
"""

from __future__ import annotations

import random

from bugfix_rl.gym.tasks import FIX_OPS


def infer_op(source_words: list[str]) -> str:
    """The oracle's keyword rule: which op a compact source calls for."""
    words = set(source_words)
    if words & {"min", "max"}:
        return "swap_minmax"
    if "//" in words:
        return "add_zero_guard"
    if "range" in words:
        return "fix_range_end"
    if words & {"<", ">"}:
        return "fix_comparison"
    return "fix_init"


def _is_source(observation: str) -> bool:
    return observation.startswith("def ")


class OraclePolicy:
    """read -> the op the keyword rule picks -> test -> submit."""

    def __init__(self, rng: random.Random | None = None):
        self.plan: list[list[str]] = [["read"]]

    def __call__(self, observation: str) -> list[str]:
        if _is_source(observation):
            self.plan = [["edit", infer_op(observation.split())], ["test"], ["submit"]]
        return self.plan.pop(0) if self.plan else ["submit"]


class RandomOpPolicy:
    """read -> a uniformly random fix op -> submit: the 1-in-5 blind-guess baseline."""

    def __init__(self, rng: random.Random):
        self.plan = [["read"], ["edit", rng.choice(FIX_OPS)], ["submit"]]

    def __call__(self, observation: str) -> list[str]:
        return self.plan.pop(0) if self.plan else ["submit"]


class NoisyPolicy:
    """The behaviour a pretrained model shows before RL: knows the calls, rarely reads, guesses.

    Reads first with probability p_read; after reading picks the right op with probability
    p_right_after_read (else a random fix op); without reading, a random fix op (rarely the exploit).
    Tests afterwards with probability p_test; sometimes wanders (an extra read/test) before it submits,
    and now and then makes a malformed call.
    """

    def __init__(self, rng: random.Random, p_read: float = 0.25, p_right_after_read: float = 0.5,
                 p_test: float = 0.35, p_wander: float = 0.2, p_malformed: float = 0.04,
                 p_exploit: float = 0.02):
        self.rng = rng
        self.p = dict(read=p_read, right=p_right_after_read, test=p_test, wander=p_wander,
                      malformed=p_malformed, exploit=p_exploit)
        self.plan = None

    def _guess(self) -> list[str]:
        if self.rng.random() < self.p["exploit"]:
            return ["edit", "hardcode_tests"]
        return ["edit", self.rng.choice(FIX_OPS)]

    def _maybe_malformed(self, words: list[str]) -> list[str]:
        if self.rng.random() < self.p["malformed"]:
            return self.rng.choice([["edit"], ["read", "read"], ["test", "submit"], ["submit", "edit"]])
        return words

    def __call__(self, observation: str) -> list[str]:
        rng, p = self.rng, self.p
        if self.plan is None:
            self.plan = []
            if rng.random() < p["read"]:
                return self._maybe_malformed(["read"])
            self.plan = [self._guess()]
        elif _is_source(observation) and not self.plan:
            right = rng.random() < p["right"]
            self.plan = [["edit", infer_op(observation.split())] if right else self._guess()]
        if not self.plan:
            self.plan = [self._guess()]
        action = self.plan.pop(0)
        if action[0] == "edit":
            tail = [["test"]] if rng.random() < p["test"] else []
            if rng.random() < p["wander"]:
                tail.append(rng.choice([["read"], ["test"]]))
            self.plan = tail + [["submit"]]
        return self._maybe_malformed(action)


SCRIPTED_POLICIES = {"oracle": OraclePolicy, "random": RandomOpPolicy, "noisy": NoisyPolicy}
