"""Sampling knobs: dynamic sampling, pass-rate task filter, curriculum, overlong buffer.

The sampler is replaced by a fake whose rewards come from a table (task -> rewards of its G
episodes), so each test knows exactly which groups are degenerate; one test runs the real Trainer
step to check the dashboard row's `sampled_episodes` (design review question 3).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from bugfix_rl.algo.advantage_stage import compute_advantages
from bugfix_rl.algo.objective import overlong_penalty
from bugfix_rl.config import AlgoConfig
from bugfix_rl.gym.edit_menu import EpisodeInfo
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.present.dashboard import dashboard_row
from bugfix_rl.rollout.collect import TaskStats, collect_step, degenerate, draw_tasks
from bugfix_rl.types import Trajectory, collate

TASKS = make_tasks("train")  # 20 tasks
G = 8


def episode(task: str, reward: float, group: int, length: int = 10) -> Trajectory:
    return Trajectory(ids=[1] * length, policy_mask=[False] + [True] * (length - 1), sampler_logp=[0.0] * length,
                      reward=reward, group=group, info=EpisodeInfo(task=task, fix_op="fix_init", submitted=True,
                                                                   hidden_pass=reward == 1.0))  # success = reward


class FakePool:
    """Stands in for a rollout pool: the first `solvable` tasks get 1 success in G, the rest 0."""

    def __init__(self, solvable: set[str]):
        self.solvable = solvable
        self.calls: list[list[str]] = []

    def result(self, pending):
        return pending

    def submit(self, tasks, group_size, temperature, generator, first_group=0):
        self.calls.append([t.name for t in tasks])
        out = []
        for i, task in enumerate(tasks):
            for j in range(group_size):
                reward = 1.0 if (task.name in self.solvable and j == 0) else 0.0
                out.append(episode(task.name, reward, first_group + i))
        return out


def collect_with(solvable: set[str], seed: int = 0, task_stats=None, **algo):
    fake = FakePool(solvable)
    config = dataclasses.replace(AlgoConfig(), **algo)
    rollouts = collect_step(fake, TASKS, config, torch.Generator().manual_seed(seed), task_stats)
    return rollouts, fake


def degenerate_groups(trajectories: list[Trajectory]) -> int:
    groups = [trajectories[i:i + G] for i in range(0, len(trajectories), G)]
    return sum(len({t.reward for t in g}) == 1 for g in groups)


# ------------------------------------------------------------------------------------------------
# Dynamic sampling.


def test_without_dynamic_sampling_one_round_of_64():
    rollouts, fake = collect_with(solvable=set())
    assert len(rollouts.kept) == len(rollouts.sampled) == 64 and rollouts.rounds == 1 and len(fake.calls) == 1


def test_hopeless_pool_spends_every_round_and_keeps_64():
    """No task can produce a mixed group: 4 rounds x 64 episodes are spent, 64 are kept (all degenerate)."""
    rollouts, fake = collect_with(solvable=set(), dynamic_sampling=True, max_sample_rounds=4)
    assert rollouts.rounds == 4 and [len(c) for c in fake.calls] == [8, 8, 8, 8]
    assert len(rollouts.sampled) == 4 * 64 and len(rollouts.kept) == 64
    row = dashboard_row(0, rollouts, {}, {})
    assert row["sampled_episodes"] == 256 and row["sample_rounds"] == 4


@pytest.mark.parametrize("seed", range(4))
def test_refills_only_degenerate_groups_and_counts_every_rollout(seed):
    solvable = {t.name for t in TASKS[:10]}  # half the pool can give a mixed group
    rollouts, fake = collect_with(solvable, seed=seed, dynamic_sampling=True, max_sample_rounds=3)
    for previous, refill in zip(fake.calls, fake.calls[1:]):
        assert len(refill) == sum(name not in solvable for name in previous)  # only still-degenerate slots
    assert rollouts.rounds == len(fake.calls) <= 3
    assert len(rollouts.sampled) == G * sum(len(c) for c in fake.calls)  # the extra rollouts are counted
    assert len(rollouts.kept) == 64
    # degenerate groups left = the last round's failed refills (or 0 if a round refilled all of them)
    left = sum(name not in solvable for name in fake.calls[-1]) if rollouts.rounds == 3 else 0
    assert degenerate_groups(rollouts.kept) == left
    assert dashboard_row(0, rollouts, {}, {})["sampled_episodes"] == len(rollouts.sampled)


def test_dynamic_sampling_stops_when_no_group_is_degenerate():
    rollouts, fake = collect_with({t.name for t in TASKS}, dynamic_sampling=True)
    assert rollouts.rounds == 1 and len(rollouts.sampled) == 64 and degenerate_groups(rollouts.kept) == 0


def test_trainer_row_counts_sampled_episodes_vs_kept_64(tmp_path):
    """The real pipeline: RL base, 8 tasks x 8 episodes, dynamic sampling on (at most 2 rounds)."""
    from bugfix_rl.config import TrainConfig
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.recipes.starting_policy import build_starting_policy
    from bugfix_rl.run.trainer import Trainer

    torch.set_num_threads(1)  # a second thread only spin-waits on a shared 2-core machine
    cfg = TrainConfig()
    cfg.algo.dynamic_sampling, cfg.algo.max_sample_rounds = True, 2
    tokenizer = build_tokenizer_for(cfg)
    make_env, close = make_env_factory(cfg.env)
    trainer = Trainer(cfg, build_starting_policy(cfg.policy, tokenizer), tokenizer, make_env, torch.Generator().manual_seed(0))
    row = trainer.step(0)
    close()
    assert row["sample_rounds"] in (1, 2)
    assert row["sampled_episodes"] >= 64 and row["sampled_episodes"] % G == 0
    assert (row["sampled_episodes"] > 64) == (row["sample_rounds"] == 2)
    assert row["policy_tokens"] > 0  # behaviour stats come from the 64 kept episodes


# ------------------------------------------------------------------------------------------------
# Task filter and curriculum (TaskStats with a hand-made rate table).

NAMES = [t.name for t in TASKS[:5]]
RATES = {NAMES[0]: 0.0, NAMES[1]: 1.0, NAMES[2]: 0.5, NAMES[3]: 0.9}  # NAMES[4] unseen: 0.5 assumed


def test_task_filter_drops_unsolvable_and_solved_tasks():
    weights = TaskStats(dict(RATES)).weights(TASKS[:5], task_filter=True, curriculum=False)
    assert weights.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0]


def test_curriculum_weights_fall_with_pass_rate():
    weights = TaskStats(dict(RATES)).weights(TASKS[:5], task_filter=False, curriculum=True)
    torch.testing.assert_close(weights, torch.tensor([1.05, 0.05, 0.55, 0.15, 0.55]))
    both = TaskStats(dict(RATES)).weights(TASKS[:5], task_filter=True, curriculum=True)
    torch.testing.assert_close(both, torch.tensor([0.0, 0.0, 0.55, 0.15, 0.55]))


def test_curriculum_draws_unsolved_tasks_more_often():
    weights = TaskStats(dict(RATES)).weights(TASKS[:5], task_filter=False, curriculum=True)
    generator = torch.Generator().manual_seed(0)
    counts = dict.fromkeys(NAMES, 0)
    for _ in range(2000):
        counts[draw_tasks(TASKS[:5], 1, weights, generator)[0].name] += 1
    assert counts[NAMES[0]] > counts[NAMES[2]] > counts[NAMES[3]] > counts[NAMES[1]]
    assert counts[NAMES[0]] / 2000 == pytest.approx(1.05 / 2.35, abs=0.04)
    assert counts[NAMES[1]] / 2000 == pytest.approx(0.05 / 2.35, abs=0.015)


def test_task_filter_in_collect_step_skips_filtered_tasks():
    informative = {t.name for t in TASKS[:10]}
    for seed in range(5):
        stats = TaskStats({t.name: (0.5 if t.name in informative else 0.0) for t in TASKS})
        _, fake = collect_with(set(), seed=seed, task_stats=stats, task_filter=True)
        assert set(fake.calls[0]) <= informative and len(fake.calls[0]) == 8


def test_too_few_informative_tasks_fill_uniformly_from_the_rest():
    """3 informative tasks, 8 to draw: the 3 always come, the other 5 vary with the seed."""
    weights = torch.zeros(len(TASKS))
    weights[[4, 9, 15]] = 1.0
    fills = set()
    for seed in range(20):
        drawn = draw_tasks(TASKS, 8, weights, torch.Generator().manual_seed(seed))
        index = [TASKS.index(t) for t in drawn]
        assert len(set(index)) == 8 and {4, 9, 15} <= set(index)
        fills |= set(index) - {4, 9, 15}
    assert len(fills) >= 12  # not always the lowest indices


def test_task_stats_update_is_an_exponential_moving_average():
    stats = TaskStats({"a": 0.5})
    stats.update([episode("a", 1.0, 0), episode("a", 1.0, 0), episode("b", 0.0, 1), episode("b", 1.0, 1)])
    assert stats.rate == {"a": 0.75, "b": 0.5}  # a: 0.5 * 0.5 + 0.5 * 1; b: first sight = its mean


def infra_failed(task: str, group: int) -> Trajectory:
    """An episode whose env raised (rollout/env_errors.py): reward 0 decided by the infrastructure."""
    t = episode(task, 0.0, group)
    t.info.env_error, t.info.hidden_pass = "ConnectionError: sandbox gone", False
    return t


def test_task_stats_leave_out_infrastructure_failures():
    """A masked episode is not a real 0 of its task's pass rate (issue 39): a and b passed every valid
    episode, their env_error episodes do not lower the rate; c had only failures of the env and keeps
    its rate. With mask_infra off they count as zeros, as before."""
    trajectories = [episode("a", 1.0, 0), infra_failed("a", 0), episode("b", 1.0, 1), infra_failed("b", 1),
                    infra_failed("b", 1), infra_failed("c", 2)]
    stats = TaskStats({"c": 0.25})
    stats.update(trajectories)
    assert stats.rate == {"a": 1.0, "b": 1.0, "c": 0.25}
    unmasked = TaskStats({"c": 0.25})
    unmasked.update(trajectories, mask_infra=False)
    assert unmasked.rate == {"a": 0.5, "b": pytest.approx(1 / 3), "c": 0.125}


class InfraPool(FakePool):
    """Every group: G - 1 successes and one episode whose grading the infrastructure failed (reward 0).
    Unmasked that group looks mixed; masked, its valid episodes all agree: no gradient."""

    def submit(self, tasks, group_size, temperature, generator, first_group=0):
        self.calls.append([t.name for t in tasks])
        return [infra_failed(task.name, first_group + i) if j == group_size - 1 else episode(task.name, 1.0, first_group + i)
                for i, task in enumerate(tasks) for j in range(group_size)]


@pytest.mark.parametrize("mask_infra", [True, False])
def test_dynamic_sampling_judges_groups_on_their_unmasked_episodes(mask_infra):
    fake = InfraPool(set())
    config = dataclasses.replace(AlgoConfig(), dynamic_sampling=True, max_sample_rounds=3, mask_infra=mask_infra)
    rollouts = collect_step(fake, TASKS, config, torch.Generator().manual_seed(0))
    # masked: every group is degenerate (7 agreeing valid episodes), refilled until the rounds run out
    assert rollouts.rounds == (3 if mask_infra else 1) and len(rollouts.kept) == 64
    assert degenerate(episodes_of := rollouts.kept[:G], mask_infra) == mask_infra
    assert degenerate(episodes_of[:1] + [infra_failed("x", 0)], mask_infra=True)  # one valid episode: no baseline


# ------------------------------------------------------------------------------------------------
# Overlong buffer (DAPO soft punishment) through the step's compute_advantages (algo/advantage_stage.py).


def test_overlong_buffer_penalises_long_episodes_in_the_advantage():
    lengths = [50, 220, 240, 256]  # context 256, buffer 64: penalty starts after 192 tokens
    kept = [episode("t", 1.0, 0, length) for length in lengths]
    rollouts = SimpleNamespace(kept=kept)
    algo = dataclasses.replace(AlgoConfig(), group_size=4, adv_mode="dr_grpo", overlong_buffer=64)
    batch = collate(kept)
    compute_advantages(batch, rollouts.kept, algo, model_len=256)
    shaped = torch.tensor([1.0, 1 - 28 / 64, 1 - 48 / 64, 0.0])  # rewards after the penalty
    torch.testing.assert_close(batch.advantages, shaped - shaped.mean())
    assert batch.advantages[0] > 0 > batch.advantages[-1]  # the short success now beats the long ones
    torch.testing.assert_close(overlong_penalty(torch.tensor(lengths), 256, 64), shaped - 1.0)

    off = collate(kept)
    compute_advantages(off, rollouts.kept, dataclasses.replace(algo, overlong_buffer=0), model_len=256)
    assert (off.advantages == 0).all()  # four equal successes: a degenerate group without the buffer
