"""The tools base's scripted agent acting on failing tests (policy.tools_base.p_fix_after_fail)."""

import random

import pytest

from bugfix_rl.config import TrainConfig
from bugfix_rl.config.validate import ConfigError, validate
from bugfix_rl.gym.agents.scripted_tools import NoisyToolsPolicy
from bugfix_rl.gym.tasks import ALL_TASKS, task_by_name
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from bugfix_rl.gym.tools.vocabulary import tools_vocabulary
from bugfix_rl.policy.tokenizer import build_tokenizer
from bugfix_rl.rollout.sampler import scripted_episode
from sandboxes import start_sandbox

TASK = task_by_name("minmax/clamp")  # def clamp(x, lo, hi): return min(lo, max(x, hi))
ALWAYS_TESTS = dict(p_read=1.0, p_miscopy=0.0, p_test=1.0, p_wander=0.0, p_malformed=0.0)


@pytest.fixture(scope="module")
def sandbox():
    with start_sandbox(workers=1) as box:
        yield box


def episode(sandbox, seed: int, **knobs):
    tokenizer = build_tokenizer(list(ALL_TASKS), extra_words=tools_vocabulary(ALL_TASKS))
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin", sandbox)
    policy = NoisyToolsPolicy(random.Random(seed), [ALL_TASKS[-1]], **ALWAYS_TESTS, **knobs)
    trajectory = scripted_episode(policy, env, tokenizer)
    return trajectory, env.info


def test_after_failing_tests_a_wrong_fix_is_edited_into_the_right_one(sandbox):
    """A wrong first fix (p_right_after_read=0) fails the public tests in its own turn; the agent then
    Edits the file as listed into the right fix, tests again and answers: solved. Without the knob it
    answers with the wrong fix in."""
    _, retried = episode(sandbox, 0, p_right_after_read=0.0, p_fix_after_fail=1.0)
    assert retried.actions == ["Read", "Edit", "Bash", "Edit", "Bash", "answer"]
    assert retried.hidden_pass and retried.test_runs == 2
    _, answered = episode(sandbox, 0, p_right_after_read=0.0, p_fix_after_fail=0.0)
    assert answered.actions == ["Read", "Edit", "Bash", "answer"] and not answered.hidden_pass


def test_a_right_fix_draws_nothing_more(sandbox):
    """When the tests pass, the knob is never drawn: the same seed gives the same episode with it and
    without it (so a base built with it at 0 is the base built before it existed)."""
    for seed in range(3):
        with_knob, _ = episode(sandbox, seed, p_right_after_read=1.0, p_fix_after_fail=1.0)
        without, _ = episode(sandbox, seed, p_right_after_read=1.0, p_fix_after_fail=0.0)
        assert with_knob.ids == without.ids


@pytest.mark.parametrize("recipe, key, value", [("tools_base", "p_fix_after_fail", 1.5), ("tools_base", "p_read", -0.1),
                                                ("base", "p_wander", 2.0)])
def test_the_config_refuses_a_probability_outside_0_1(recipe, key, value):
    cfg = TrainConfig()
    setattr(getattr(cfg.policy, recipe), key, value)
    with pytest.raises(ConfigError, match=rf"policy.{recipe}.{key}={value} must lie in \[0, 1\]"):
        validate(cfg)
