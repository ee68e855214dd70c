"""The tools base's scripted agent acting on failing tests (policy.tools_base.p_fix_after_fail)."""

import hashlib
import random

import pytest

from bugfix_rl.config import TrainConfig
from bugfix_rl.config.validate import ConfigError, validate
from bugfix_rl.gym.agents.scripted_tools import NoisyToolsPolicy, run_failed
from bugfix_rl.gym.tasks import ALL_TASKS, task_by_name
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from bugfix_rl.rollout.sampler import scripted_episode
from sandboxes import start_sandbox

TASK = task_by_name("minmax/clamp")  # def clamp(x, lo, hi): return min(lo, max(x, hi))
ALWAYS_TESTS = dict(p_read=1.0, p_miscopy=0.0, p_test=1.0, p_wander=0.0, p_malformed=0.0)


@pytest.fixture(scope="module")
def sandbox():
    with start_sandbox(workers=1) as box:
        yield box


def episode(sandbox, tools_tokenizer, seed: int, **knobs):
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin", sandbox)
    policy = NoisyToolsPolicy(random.Random(seed), [ALL_TASKS[-1]], **ALWAYS_TESTS, **knobs)
    trajectory = scripted_episode(policy, env, tools_tokenizer)
    return trajectory, env.info


def test_after_failing_tests_a_wrong_fix_is_edited_into_the_right_one(sandbox, tools_tokenizer):
    """A wrong first fix (p_right_after_read=0) fails the public tests in its own turn; the agent then
    Edits the file as listed into the right fix, tests again and answers: solved. Without the knob it
    answers with the wrong fix in."""
    _, retried = episode(sandbox, tools_tokenizer, 0, p_right_after_read=0.0, p_fix_after_fail=1.0)
    assert retried.actions == ["Read", "Edit", "Bash", "Edit", "Bash", "answer"]
    assert retried.hidden_pass and retried.test_runs == 2
    _, answered = episode(sandbox, tools_tokenizer, 0, p_right_after_read=0.0, p_fix_after_fail=0.0)
    assert answered.actions == ["Read", "Edit", "Bash", "answer"] and not answered.hidden_pass


def test_a_failing_run_is_told_by_its_exit_code_whatever_its_summary_says(sandbox):
    """Failing tests, a file that does not import (pytest's collection error: no word `failed`) and a
    passing run, as the tools env's compact view shows them after `Bash pytest`."""
    outputs = {}
    for name, edit in (("failing", "Edit pin.py old < new >"), ("broken", "Edit pin.py old min new min ("),
                       ("passing", "Edit pin.py old min ( lo , max ( x , hi ) ) new max ( lo , min ( x , hi ) )")):
        env = ToolsEnv(TASK, ToolsEnvConfig(), "pin", sandbox)
        env.step("Read pin.py".split())
        env.step(edit.split())
        outputs[name] = env.step("Bash pytest".split())
    assert "failed" in outputs["failing"].split() and "failed" not in outputs["broken"].split()
    assert run_failed(outputs["failing"]) and run_failed(outputs["broken"]) and not run_failed(outputs["passing"])


MIXED = dict(p_read=0.8, p_right_after_read=0.5, p_test=0.7, p_wander=0.3, p_malformed=0.1)
# book_episodes' digest and next draw at MIXED with the agent of 1f32508~1, before any of its knobs
PINNED = ("6e27f9d908118a69", 0.917997825428623)


def book_episodes(sandbox, tools_tokenizer, **knobs) -> tuple[str, float]:
    """(a digest of the 20 book tasks' episodes of one agent stream, the stream's next draw)."""
    rng, digest = random.Random(5), hashlib.sha256()
    for task in ALL_TASKS:
        env = ToolsEnv(task, ToolsEnvConfig(), "pin", sandbox)
        trajectory = scripted_episode(NoisyToolsPolicy(rng, [ALL_TASKS[0]], **knobs), env, tools_tokenizer)
        digest.update(repr(trajectory.ids).encode())
    return digest.hexdigest()[:16], rng.random()


def test_at_0_the_episodes_are_those_pinned_before_the_knob(sandbox, tools_tokenizer):
    """The digest and the next draw were computed with the agent of 1f32508~1, which had no such knob:
    at 0 nothing is drawn or done differently (so the bases built before it stand), while at 1 the same
    stream's wrong fixes that failed their tests are followed by a second Edit."""
    assert book_episodes(sandbox, tools_tokenizer, **MIXED, p_fix_after_fail=0.0) == PINNED
    assert book_episodes(sandbox, tools_tokenizer, **MIXED, p_fix_after_fail=1.0)[0] != PINNED[0]


def test_passing_tests_draw_nothing(sandbox, tools_tokenizer):
    """When every fix is right the tests pass and the knob is never drawn: the same episodes and the same
    stream with it at 1 as at 0, the other choices drawn at middling probabilities."""
    right = {**MIXED, "p_right_after_read": 1.0}
    with_knob = book_episodes(sandbox, tools_tokenizer, **right, p_fix_after_fail=1.0)
    assert with_knob == book_episodes(sandbox, tools_tokenizer, **right, p_fix_after_fail=0.0)


@pytest.mark.parametrize("recipe, key, value", [("tools_base", "p_fix_after_fail", 1.5), ("tools_base", "p_read", -0.1),
                                                ("base", "p_wander", 2.0)])
def test_the_config_refuses_a_probability_outside_0_1(recipe, key, value):
    cfg = TrainConfig()
    setattr(getattr(cfg.policy, recipe), key, value)
    with pytest.raises(ConfigError, match=rf"policy.{recipe}.{key}={value} must lie in \[0, 1\]"):
        validate(cfg)
