"""Flaky rewards (design-review question 9, issue 39): the per-reward flip (env.reward_flip_rate), majority-
vote reruns (env.grade_reruns), the agreement rate and the measured per-test flakiness (regrade.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from scripted_draws import Scripted

from bugfix_rl.config import ConfigError, EnvConfig, TrainConfig, validate
from bugfix_rl.gym.edit_menu import EditMenuEnv
from bugfix_rl.gym.envs import make_env_factory
from bugfix_rl.gym.regrade import (Regrade, flake_rate_from_disagreement, graded_rewards, grading_metrics, majority,
                                   majority_error, pair_disagreement)
from bugfix_rl.gym.rewards import RewardSpec
from bugfix_rl.gym.tasks import make_tasks

TASKS = make_tasks("train")


def test_the_pure_pieces_by_hand():
    assert majority([1.0, 0.0, 1.0]) == 1.0 and majority([0.0, 0.0, 1.0]) == 0.0 and majority([1.0]) == 1.0
    assert majority_error(0.1, 3) == pytest.approx(3 * 0.1**2 * 0.9 + 0.1**3)  # 0.028
    assert majority_error(0.1, 1) == pytest.approx(0.1)
    assert pair_disagreement(1, 3) == pytest.approx(2 / 3) and pair_disagreement(3, 3) == 0.0
    assert pair_disagreement(2, 4) == pytest.approx(4 / 6)
    assert flake_rate_from_disagreement(2 * 0.1 * 0.9) == pytest.approx(0.1)
    assert flake_rate_from_disagreement(0.0) == 0.0 and flake_rate_from_disagreement(0.5) == pytest.approx(0.5)


def test_graded_rewards_with_scripted_draws():
    spec = RewardSpec()  # hidden, no per-test flips: no draws for the tests
    # three gradings of a fixed state (every test passes): verdict flips drawn 0.1 < 0.3, 0.5, 0.2 < 0.3
    verdicts, passes = graded_rewards(spec, [True, True], [True], Regrade(0.3, 3), Scripted([0.1, 0.5, 0.2]))
    assert verdicts == [0.0, 1.0, 0.0] and majority(verdicts) == 0.0 and passes == [3, 3, 3]
    # one grading: the gym's own verdict (`first`) is the grading, only the verdict flip is drawn
    assert graded_rewards(spec, [True], [True], Regrade(0.3, 1), Scripted([0.9]), first=1.0) == ([1.0], [0, 0])
    # per-test flips at 0.5 (draws < 0.5 flip): grading 1 flips hidden test 2, grading 2 nothing, grading 3 the public
    flaky = RewardSpec(flaky_rate=0.5)
    verdicts, passes = graded_rewards(flaky, [True, True], [True], Regrade(0.0, 3),
                                      Scripted([0.9, 0.1, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.1]))
    assert verdicts == [0.0, 1.0, 1.0] and passes == [3, 2, 2]


def test_grading_metrics_by_hand():
    infos = [SimpleNamespace(grade_verdicts=[1.0, 1.0, 0.0], grade_test_passes=[3, 2]),
             SimpleNamespace(grade_verdicts=[0.0, 0.0, 0.0], grade_test_passes=[0, 0])]
    metrics = grading_metrics([SimpleNamespace(info=i) for i in infos] + [SimpleNamespace(info=SimpleNamespace())])
    assert metrics["grade_agreement"] == pytest.approx((2 / 3 + 1) / 2)
    d = (0 + 2 / 3 + 0 + 0) / 4  # pair disagreement per test
    assert metrics["test_flake_rate"] == pytest.approx((1 - math.sqrt(1 - 2 * d)) / 2)
    assert grading_metrics([]) == {"grade_agreement": None, "test_flake_rate": None}


def fixed_episode(make_env, task, seed):
    """The edit-menu episode that applies the task's fix and submits: every true outcome passes."""
    env = make_env(task, None)
    env.seed(seed)
    env.step(["edit", task.fix_op])
    env.step(["submit"])
    return env


def rewards_of(**env):
    make_env, _ = make_env_factory(EnvConfig(**env))
    episodes = [fixed_episode(make_env, TASKS[i % len(TASKS)], i) for i in range(400)]
    assert all(e.info.success for e in episodes)  # success keeps the true outcomes
    return [e.reward for e in episodes], episodes


def test_defaults_keep_the_gyms_env_class():
    make_env, _ = make_env_factory(EnvConfig())
    assert type(make_env(TASKS[0], None)) is EditMenuEnv


def test_a_per_reward_flip_pays_a_fixed_episode_zero_at_its_rate():
    rewards, episodes = rewards_of(reward_flip_rate=0.25)
    assert set(rewards) == {0.0, 1.0}
    assert rewards.count(0.0) / 400 == pytest.approx(0.25, abs=0.05)  # binomial sd 0.022 at n = 400
    assert [e.reward for e in episodes] == rewards  # fixed once the episode has ended
    again, _ = rewards_of(reward_flip_rate=0.25)
    assert again == rewards  # from each episode's own seeded stream


def test_majority_of_three_reruns_votes_the_flips_down_and_measures_them():
    """Verdict flips at 0.25: one grading pays a fixed episode 0 a quarter of the time, the majority of 3
    only majority_error(0.25, 3) = 0.156 of it. Per-test flips at 0.1 on top (4-7 tests per task) are
    measured back from the reruns: test_flake_rate near 0.1; the agreement rate is below 1."""
    single, _ = rewards_of(reward_flip_rate=0.25)
    voted, episodes = rewards_of(reward_flip_rate=0.25, grade_reruns=3)
    assert voted.count(0.0) / 400 == pytest.approx(majority_error(0.25, 3), abs=0.05)
    assert voted.count(0.0) < single.count(0.0)
    _, flaky = rewards_of(flaky_rate=0.1, grade_reruns=3)
    metrics = grading_metrics([SimpleNamespace(info=e.info) for e in flaky])
    assert metrics["test_flake_rate"] == pytest.approx(0.1, abs=0.02)
    assert 0.5 < metrics["grade_agreement"] < 1.0
    clean = grading_metrics([SimpleNamespace(info=e.info) for e in rewards_of(grade_reruns=3)[1]])
    assert clean == {"grade_agreement": 1.0, "test_flake_rate": 0.0}


def test_an_unsubmitted_episode_is_not_regraded():
    make_env, _ = make_env_factory(EnvConfig(reward_flip_rate=0.5, grade_reruns=3, max_turns=2))
    env = make_env(TASKS[0], None)
    env.step(["read"])
    env.step(["read"])  # the turn limit: ended unsubmitted, paid 0 (truncation=zero)
    assert env.done and env.reward == 0.0 and not hasattr(env.info, "grade_verdicts")


@pytest.mark.parametrize("env,match", [({"grade_reruns": 2}, "odd"), ({"reward_flip_rate": 0.6}, "reward_flip_rate"),
                                       ({"grade_reruns": 3, "reward": "partial"}, "hidden or public")])
def test_bad_settings_are_config_errors(env, match):
    cfg = TrainConfig()
    for key, value in env.items():
        setattr(cfg.env, key, value)
    with pytest.raises(ConfigError, match=match):
        validate(cfg)


def test_the_tools_env_is_regraded_from_its_one_sandbox_grading():
    """The tools env grades once in the sandbox; the reruns re-draw the flips over those outcomes. The
    task's buggy source (submitted unchanged) fails some hidden test: with no flips all three verdicts
    are 0 and each test's pass count is 0 or 3; make_env keeps its sandbox for the run's other work."""
    from bugfix_rl.gym.tools.env import ToolsEnv

    make_env, close = make_env_factory(EnvConfig(name="tools", grade_reruns=3))
    try:
        assert make_env.sandbox is not None
        env = make_env(TASKS[0], None)
        assert isinstance(env, ToolsEnv) and type(env) is not ToolsEnv
        env._finish()  # the episode's end as the env reaches it: grade the final file
        assert env.reward == 0.0 and env.info.grade_verdicts == [0.0, 0.0, 0.0]
        assert set(env.info.grade_test_passes) <= {0, 3} and 0 in env.info.grade_test_passes
    finally:
        close()


def test_a_training_run_logs_the_agreement_and_the_measured_flakiness(tmp_path):
    """+exp=smoke, 2 steps, per-test flips at 0.2 graded 3 times: every row has grade_agreement and
    test_flake_rate (the flake rate measured back from the reruns)."""
    import json

    import torch

    from bugfix_rl import cli

    threads = torch.get_num_threads()
    try:
        cli.main(["train", "+exp=smoke", "preflight=false", "threads=1", "eval.test=false", "logger.console=false",
                  "env.flaky_rate=0.2", "env.grade_reruns=3", f"hydra.run.dir={tmp_path}"])
    finally:
        torch.set_num_threads(threads)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert 0 < row["grade_agreement"] < 1 and 0.05 < row["test_flake_rate"] < 0.4
