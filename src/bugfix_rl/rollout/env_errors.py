"""Episodes whose env raised: ended as failed, so one bad episode never ends a training run.

The envs turn everything a model can cause into a failed call of a named kind; what still raises
from `env.step` is internal (the sandbox gone, a bug). The rollout loops call the env through
`step_or_fail`: the episode ends there with reward 0 and `info.env_error = 'Kind: message'` (its
metrics count it as `env_error` and `env_error_<Kind>`, so the dashboard shows how often and why),
and the other episodes go on. Only a batch in which every episode failed stops the run, with the
one-line `RolloutFailed` (`check_batch`).
"""

from __future__ import annotations

from collections import Counter


class RolloutFailed(RuntimeError):
    """Every episode of a batch failed inside its env: printed as one line, the run stops."""


class HiddenTestLeak(RolloutFailed):
    """The leakage canary (env.leak_canary, design-review question 11): hidden-test text appeared in an
    observation the env wrote. An env bug, never the policy's doing: the run stops, one line."""


def step_or_fail(env, step, action):
    """`step(action)` (an env's step or a chat front-end's step bound to it), or, if it raises an
    Exception, the episode ended as failed and '' (nothing more is shown: the env is done)."""
    try:
        return step(action)
    except Exception as error:
        end_failed(env, error)
        return ""


def end_failed(env, error: BaseException) -> None:
    """End `env`'s episode unrewarded with the error's kind and first line in its info."""
    env.info.env_error = f"{type(error).__name__}: {error}".splitlines()[0][:200]
    env.done = True


INFRASTRUCTURE_CAUSES = ("env_error", "sandbox_error")


def infrastructure_failure(info) -> str:
    """Why the infrastructure, not the policy, decided this episode's reward, or '' when it did not:
    `env_error` (the env raised for an internal reason) or `sandbox_error` (the final grading's sandbox
    call failed before any model code ran, or lost its server: the grader's flag). The trainer masks
    such episodes out of the advantages and the pass rates (algo/infra_mask.py)."""
    if getattr(info, "env_error", ""):
        return "env_error"
    if "sandbox_error" in getattr(info, "grade_flags", ()):
        return "sandbox_error"
    return ""


def check_batch(trajectories: list) -> list:
    """The trajectories, unless every one of them ended in an env error (RolloutFailed) or one of them
    saw hidden-test text (HiddenTestLeak)."""
    leaked = [t.info for t in trajectories if getattr(t.info, "leaked", "")]
    if leaked:
        raise HiddenTestLeak(f"leakage canary: hidden-test text {leaked[0].leaked!r} of task {leaked[0].task} appeared"
                             f" in an observation ({len(leaked)} episodes of the batch); fix the env before training")
    errors = [t.info.env_error for t in trajectories if getattr(t.info, "env_error", "")]
    if trajectories and len(errors) == len(trajectories):
        kinds = Counter(error.split(":")[0] for error in errors)
        counts = ", ".join(f"{count} x {kind}" for kind, count in kinds.most_common())
        raise RolloutFailed(f"every episode of the batch failed inside its env ({counts}); first: {errors[0]}")
    return trajectories
