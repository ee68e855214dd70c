"""Rejection-sampling SFT (cold_start.source=rejection; recipes/demonstrations.rejection_sampled): the
policy's own episodes that passed the hidden tests, and nothing else, become its SFT data, and the
cold start trains on them. Run by hand before issue 36; these are its tests."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from bugfix_rl import cli
from bugfix_rl.algo.sft import sft_train
from bugfix_rl.config import TrainConfig
from bugfix_rl.errors import PreflightFailed
from bugfix_rl.gym.envs import make_env_factory
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.build import build_policy, build_tokenizer_for
from bugfix_rl.recipes.cold_start import cold_start
from bugfix_rl.recipes.demonstrations import rejection_sampled
from bugfix_rl.recipes.starting_policy import build_starting_policy
from bugfix_rl.rollout.collect import sample_groups

PER_TASK, SEED = 4, 0


@pytest.fixture(scope="module")
def partial_reward():
    """The RL base on the training tasks under env.reward=partial, where a failed episode can still be
    paid for the share of tests it passes: (cfg, model, tokenizer, make_env)."""
    torch.set_num_threads(1)
    cfg = TrainConfig()
    cfg.env = dataclasses.replace(cfg.env, reward="partial")
    tokenizer = build_tokenizer_for(cfg)
    model = build_starting_policy(cfg.policy, tokenizer)  # the RL base, from the cache
    make_env, close_env = make_env_factory(cfg.env)
    yield cfg, model, tokenizer, make_env
    close_env()


def test_the_demonstrations_are_exactly_the_successes_of_the_sampled_episodes(partial_reward):
    cfg, model, tokenizer, make_env = partial_reward
    tasks = make_tasks("train")
    demos = rejection_sampled(model, tokenizer, tasks, PER_TASK, make_env, cfg.algo.temperature, SEED)
    sampled = sample_groups(model, tokenizer, tasks, PER_TASK, make_env, cfg.algo.temperature,
                            torch.Generator().manual_seed(SEED))  # the same stream: the same episodes
    successes = [t for t in sampled if t.info.success]
    assert 0 < len(demos) < len(sampled)  # the base solves some episodes, not all
    assert [t.ids for t in demos] == [t.ids for t in successes]
    # paid but failed (partial credit): rejected, the verdict is the hidden tests, not the reward
    paid_failures = [t for t in sampled if t.reward > 0 and not t.info.success]
    assert paid_failures and not any(t.ids == p.ids for t in demos for p in paid_failures)


def test_sft_on_its_own_successes_raises_their_likelihood(partial_reward):
    cfg, model, tokenizer, make_env = partial_reward
    demos = rejection_sampled(model, tokenizer, make_tasks("train"), PER_TASK, make_env, cfg.algo.temperature, SEED)
    student = copy.deepcopy(model)
    losses = sft_train(student, demos, steps=8, lr=1e-3, batch_size=8, generator=torch.Generator().manual_seed(0))
    assert len(losses) == 8 and losses[-1] < losses[0]
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), student.parameters()))


def test_a_policy_that_never_succeeds_stops_the_cold_start_with_one_line():
    cfg = TrainConfig()
    cfg.cold_start = dataclasses.replace(cfg.cold_start, enabled=True, source="rejection", rejection_per_task=1)
    cfg.logger.console = False
    tokenizer = build_tokenizer_for(cfg)
    torch.manual_seed(0)
    scratch = build_policy(cfg.policy, tokenizer, init="scratch")
    make_env, close_env = make_env_factory(cfg.env)
    try:
        with pytest.raises(PreflightFailed, match="^cold start: rejection sampling found no successful episode"):
            cold_start(cfg, scratch, tokenizer, make_env)
    finally:
        close_env()


def test_sft_command_with_rejection_sampling(tmp_path, capsys):
    cli.main(["sft", "threads=1", "cold_start.source=rejection", "cold_start.rejection_per_task=2",
              "cold_start.steps=4", "eval.n_val=2", f"hydra.run.dir={tmp_path}"])
    out = capsys.readouterr().out
    assert "SFT (rejection, 4 steps): loss" in out and "validation pass@1" in out
    assert (tmp_path / "sft.safetensors").is_file()
