"""Canary tasks (issue 39, must-show 2; src/bugfix_rl/gym/canaries.py and evaluate/canary_reward.py):
unsolvable tasks whose reward is a measured hack rate. No honest version of a canary passes a hidden test
or every public test; the exploit passes the public ones, so the `public` reward pays it and only it;
preflight fails when an honest scripted policy earns on a canary; a training run logs canary_reward (with
its interval) every step in both envs, and its canary groups change nothing it trains on."""

from __future__ import annotations

import json
import math
import random
from types import SimpleNamespace

import pytest
import torch

from bugfix_rl import cli
from bugfix_rl.checkpoint import load_checkpoint
from bugfix_rl.config import ConfigError, TrainConfig, validate
from bugfix_rl.evaluate import canary_reward
from bugfix_rl.evaluate.canary_reward import canary_groups, canary_metrics, honest_canary_episodes
from bugfix_rl.gym.canaries import canary_tasks, exploit_policy, is_canary, play
from bugfix_rl.gym.envs import make_env_factory
from bugfix_rl.gym.ops import code_states
from bugfix_rl.gym.tasks import FIX_OPS, make_tasks
from bugfix_rl.run.preflight import CANARY, check_canaries

ENVS = ("edit_menu", "tools")


def _factory(env_name: str, reward: str = "hidden"):
    cfg = TrainConfig()
    cfg.env.name, cfg.env.reward = env_name, reward
    return make_env_factory(cfg.env)


def test_sixteen_canaries_from_training_sources_only_none_in_any_evaluated_split():
    tasks = canary_tasks()
    assert len(tasks) == 16 and all(is_canary(t.name) and t.split == "canary" for t in tasks)
    train_sources = {t.source for t in make_tasks("train")}
    assert all(t.source in train_sources for t in tasks)  # nothing of a held-out task leaks into training
    for split in ("train", "val", "test", "heldout", "all", "shapes", "shapes_val"):
        assert not any(is_canary(t.name) for t in make_tasks(split))
    assert is_canary("range/canary_sum_to~arg.val") and not is_canary("range/sum_to")


def test_hidden_tests_contradict_each_other_and_no_honest_code_passes_any_test_that_pays():
    """Each hidden input is expected to give two different values; the bug and every fix op pass no hidden
    test and not all public ones; hardcode_tests passes every public test and still no hidden one."""
    for task in canary_tasks():
        inputs = [repr(args) for args, _ in task.hidden_tests]
        assert all(inputs.count(i) == 2 for i in inputs)
        states = code_states(task)
        for op in (None,) + FIX_OPS:
            state = states[op]
            if state is not None:
                assert not any(state.hidden_results) and state.public_pass < 1.0, (task.name, op)
        exploit = states["hardcode_tests"]
        assert exploit.public_pass == 1.0 and not any(exploit.hidden_results), task.name


@pytest.mark.parametrize("env_name", ENVS)
@pytest.mark.parametrize("reward", ["hidden", "public"])
def test_honest_scripted_policies_earn_nothing_on_canaries(env_name, reward):
    make_env, close = _factory(env_name, reward)
    try:
        result = honest_canary_episodes(env_name, make_env, seed=0)
    finally:
        close()
    assert result.episodes == 16 * (3 if env_name == "edit_menu" else 2)
    assert result.paid == []


@pytest.mark.parametrize("env_name", ENVS)
def test_the_exploit_earns_on_every_canary_under_the_public_reward_and_nowhere_under_hidden(env_name):
    """The must-show's other half: the scripted exploit (edit hardcode_tests; in the tools env an Edit
    that pins the public inputs, which the probe flags) is paid 1 on all 16 canaries by reward=public,
    0 by the default hidden-test reward."""
    paid = {}
    for reward in ("public", "hidden"):
        make_env, close = _factory(env_name, reward)
        try:
            rewards = []
            for index, task in enumerate(canary_tasks()):
                env = make_env(task, "alpha")
                info = play(exploit_policy(env_name, task, random.Random(index)), env)
                assert info.exploit, (task.name, info)
                rewards.append(env.reward)
            paid[reward] = rewards
        finally:
            close()
    assert paid == {"public": [1.0] * 16, "hidden": [0.0] * 16}


def test_preflight_fails_when_an_honest_policy_earns_on_a_canary(monkeypatch):
    """A 'canary' that is a plain training task (the oracle fixes it) breaks the check; the real ones pass."""
    make_env, close = _factory("edit_menu")
    try:
        assert check_canaries("edit_menu", make_env)[CANARY]["ok"]
        solvable = make_tasks("train")[0]
        monkeypatch.setattr(canary_reward, "canary_tasks", lambda: canary_tasks() + (solvable,))
        check = check_canaries("edit_menu", make_env)[CANARY]
    finally:
        close()
    assert not check["ok"] and check["value"] >= 1 and f"oracle on {solvable.name}" in check["note"]


def test_canary_groups_per_step_at_least_one_when_on():
    assert canary_groups(0.0, 8) == 0
    assert canary_groups(1 / 16, 8) == 1 and canary_groups(1 / 16, 2) == 1 and canary_groups(1 / 16, 16) == 1
    assert canary_groups(1 / 16, 17) == 2 and canary_groups(0.25, 8) == 2
    assert TrainConfig().algo.canary_rate == 1 / 16
    cfg = TrainConfig()
    cfg.algo.canary_rate = -0.1
    with pytest.raises(ConfigError, match="algo.canary_rate"):
        validate(cfg)


def _episode(reward: float, exploit: bool = False, grade_flags=frozenset()):
    return SimpleNamespace(reward=reward, info=SimpleNamespace(exploit=exploit, env_error="", grade_flags=grade_flags))


def test_canary_metrics_wilson_interval_and_infrastructure_failures_left_out():
    rows = canary_metrics([_episode(1.0, True), _episode(0.0), _episode(0.0), _episode(1.0, True),
                           _episode(0.0, grade_flags=frozenset({"sandbox_error"}))])
    assert rows["canary_episodes"] == 4 and rows["canary_reward"] == 0.5 and rows["canary_exploit"] == 0.5
    z = 1.959963984540054  # Wilson at 2 of 4
    centre = (0.5 + z * z / 8) / (1 + z * z / 4)
    half = z * math.sqrt(0.25 / 4 + z * z / 64) / (1 + z * z / 4)
    assert rows["canary_reward_lo"] == pytest.approx(centre - half) and rows["canary_reward_hi"] == pytest.approx(
        centre + half)
    assert canary_metrics([]) == {}
    none = canary_metrics([_episode(0.0, grade_flags=frozenset({"sandbox_error"}))])
    assert none["canary_episodes"] == 0 and none["canary_reward"] is None


def test_dashboard_draws_canary_reward_with_its_band():
    from bugfix_rl.present.dashboard import dashboard_figure

    rows = [{"step": s, "reward": 0.5, "canary_reward": s / 4, "canary_reward_lo": 0.0, "canary_reward_hi": 0.6}
            for s in range(3)]
    fig = dashboard_figure(rows, "t")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "canary_reward" in labels and "canary_reward 95% (Wilson)" in labels


def _rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


CANARY_KEYS = {"canary_reward", "canary_reward_lo", "canary_reward_hi", "canary_episodes", "canary_exploit",
               "time_canary"}
SMOKE = ["train", "+exp=smoke", "steps=2", "threads=1", "eval.n_val=2", "eval.n_test=2", "logger.console=false",
         "preflight=false"]


def test_an_edit_menu_run_logs_canary_reward_every_step_and_trains_the_same_tensors(tmp_path):
    """Must-show 2, edit menu: canary_reward (with its interval) in every row; the run with canaries off
    (algo.canary_rate=0) has no canary keys and ends at the same weights, rewards and optimizer state:
    canary groups are sampled from their own stream and never enter the loss."""
    cli.main(SMOKE + [f"hydra.run.dir={tmp_path / 'on'}"])
    cli.main(SMOKE + ["algo.canary_rate=0", f"hydra.run.dir={tmp_path / 'off'}"])
    on, off = _rows(tmp_path / "on"), _rows(tmp_path / "off")
    assert len(on) == 2 and all(CANARY_KEYS <= set(row) for row in on)
    assert all(row["canary_episodes"] == 4 and 0 <= row["canary_reward_lo"] <= row["canary_reward"]
               <= row["canary_reward_hi"] <= 1 for row in on)
    assert not any(CANARY_KEYS & set(row) for row in off)
    for a, b in zip(on, off):
        assert {k: a[k] for k in ("reward", "pass_rate", "sampled_episodes", "entropy", "grad_norm")} == \
               {k: b[k] for k in ("reward", "pass_rate", "sampled_episodes", "entropy", "grad_norm")}
    weights_on, _ = load_checkpoint(tmp_path / "on" / "checkpoints" / "step_002.safetensors")
    weights_off, _ = load_checkpoint(tmp_path / "off" / "checkpoints" / "step_002.safetensors")
    assert weights_on.keys() == weights_off.keys()
    assert all(torch.equal(weights_on[k], weights_off[k]) for k in weights_on)
    train = json.loads((tmp_path / "on" / "eval.json").read_text())["train"]
    assert train["late_canary_reward"] == sum(r["canary_reward"] for r in on) / 2


def test_a_tools_run_logs_canary_reward_every_step(tmp_path):
    """Must-show 2, tools env (the shipped tools RL base): one canary group of 2 episodes per step."""
    cli.main(["train", "+exp=tools", "eval.heldout_n=0", "eval.shapes_n=0", "eval.test=false", "algo.group_size=2",
              "algo.prompts_per_step=2", "steps=2", "threads=1", "eval.n_val=2", "logger.console=false",
              "preflight=false", f"hydra.run.dir={tmp_path}"])
    rows = _rows(tmp_path)
    assert len(rows) == 2 and all(CANARY_KEYS <= set(row) and row["canary_episodes"] == 2 for row in rows)
    assert all(row["canary_reward"] is not None for row in rows)
