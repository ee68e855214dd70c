"""Per-turn credit (algo/turn_credit.py, issue 35): the math by hand, the stage that fills
Batch.turn_advantages, bit-identical outcome-only results when it is off, turns found in the token
stream equal to the tools env's own, and one training step on the tools env with it on."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
import torch
from in_process import cli_result

from bugfix_rl.algo.advantage_stage import advantage_stage
from bugfix_rl.algo.advantages import ADVANTAGES
from bugfix_rl.algo.objective import AGGREGATIONS, RATIOS, aggregate, ppo_clip_loss
from bugfix_rl.algo.turn_credit import (discounted_returns, episode_turn_rewards, token_values, turn_advantages,
                                        turn_index)
from bugfix_rl.algo.update import minibatch_loss, policy_update, token_logprobs, zero_advantage_split
from bugfix_rl.config import AlgoConfig, ConfigError, TrainConfig, TurnCreditConfig, validate
from bugfix_rl.gym.edit_menu import EpisodeInfo
from bugfix_rl.types import Trajectory, collate

from test_trainer_contract import scratch_model  # noqa: E402  (same folder)

# ---------------------------------------------------------------- the math by hand


def test_turn_index_numbers_the_runs_of_policy_tokens():
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 0, 1, 1],
                         [1, 0, 1, 1, 1, 0, 0, 0, 0],
                         [0, 0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.float)
    assert turn_index(mask).tolist() == [[-1, 0, 0, -1, -1, 1, -1, 2, 2],
                                         [0, -1, 1, 1, 1, -1, -1, -1, -1],
                                         [-1] * 9]


def test_episode_turn_rewards():
    assert episode_turn_rewards([0, 2, 0], 3, False, 0.5, 1.0) == [0.0, -1.0, -1.0]
    assert episode_turn_rewards([1], 3, True, 0.5, 1.0) == [-0.5, 0.0, 0.0]  # turns the env did not record: 0
    assert episode_turn_rewards([0, 0, 1], 2, True, 0.5, 1.0) == [0.0, 0.0]  # cut to the turns found
    assert episode_turn_rewards([], 0, False, 0.5, 1.0) == []


# One group of three episodes (malformed calls per turn; answered?):
#   a: [0, 1, 0], answered   -> r = [0, -0.5, 0]
#   b: [0, 0], not answered  -> r = [0, -1]
#   c: [1], answered         -> r = [-0.5]
REWARDS = torch.tensor([[[0.0, -0.5, 0.0], [0.0, -1.0, 0.0], [-0.5, 0.0, 0.0]]])  # [1, 3, 3]
EXISTS = torch.tensor([[[True, True, True], [True, True, False], [True, False, False]]])


def test_turn_advantages_by_hand_gamma_half():
    # returns: a [-0.25, -0.5, 0], b [-0.5, -1], c [-0.5]
    # turn 0, all three: a -0.25 - mean(-0.5, -0.5) = 0.25; b -0.5 - mean(-0.25, -0.5) = -0.125; c the same
    # turn 1, a and b: a -0.5 - (-1) = 0.5; b -1 - (-0.5) = -0.5.  turn 2, a alone: baseline 0, return 0
    expected = torch.tensor([[[0.25, 0.5, 0.0], [-0.125, -0.5, 0.0], [-0.125, 0.0, 0.0]]])
    assert torch.equal(turn_advantages(REWARDS, EXISTS, 0.5), expected)


def test_turn_advantages_by_hand_gamma_one_and_zero():
    # gamma 1: returns a [-0.5, -0.5, 0], b [-1, -1], c [-0.5]
    # turn 0: a -0.5 - (-0.75) = 0.25; b -1 - (-0.5) = -0.5; c -0.5 - (-0.75) = 0.25. turn 1: a 0.5, b -0.5
    expected = torch.tensor([[[0.25, 0.5, 0.0], [-0.5, -0.5, 0.0], [0.25, 0.0, 0.0]]])
    assert torch.equal(turn_advantages(REWARDS, EXISTS, 1.0), expected)
    # gamma 0: returns = the turn's own reward. turn 0: a 0 - (-0.25) = 0.25, b 0.25, c -0.5 - 0 = -0.5
    expected = torch.tensor([[[0.25, 0.5, 0.0], [0.25, -0.5, 0.0], [-0.5, 0.0, 0.0]]])
    assert torch.equal(turn_advantages(REWARDS, EXISTS, 0.0), expected)


def test_the_baseline_uses_no_turn_reward_of_the_episode_itself():
    """Changing a reward of episode a moves a's advantages by exactly its returns' change (a's baselines
    stay), and at turn 0 b's and c's by minus that change over the 2 episodes their baselines average."""
    changed = REWARDS.clone()
    changed[0, 0, 2] = -7.0
    before, after = turn_advantages(REWARDS, EXISTS, 1.0), turn_advantages(changed, EXISTS, 1.0)
    assert torch.equal(after[0, 0] - before[0, 0], torch.tensor([-7.0, -7.0, -7.0]))  # a's returns; baseline fixed
    assert torch.equal(after[0, 1:, 0] - before[0, 1:, 0], torch.tensor([3.5, 3.5]))  # -(-7) / 2 in b's, c's baseline


def test_a_degenerate_group_gets_zero_turn_advantage():
    rewards = torch.tensor([[[-0.5, 0.0], [-0.5, 0.0]]])
    assert torch.equal(turn_advantages(rewards, torch.ones(1, 2, 2, dtype=torch.bool), 0.7), torch.zeros(1, 2, 2))


def test_discounted_returns_match_a_loop():
    rewards = torch.randn(4, 5, 7, generator=torch.Generator().manual_seed(0))
    for gamma in (0.0, 0.3, 1.0):
        loop = torch.zeros_like(rewards)
        running = torch.zeros(4, 5)
        for k in reversed(range(7)):
            running = rewards[..., k] + gamma * running
            loop[..., k] = running
        torch.testing.assert_close(discounted_returns(rewards, gamma), loop, rtol=0, atol=1e-6)


def test_token_values_gives_each_policy_token_its_turn_value():
    per_turn = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    turns = torch.tensor([[-1, 0, 0, -1, 1, 2], [0, -1, 1, -1, -1, -1]])
    assert token_values(per_turn, turns).tolist() == [[0, 1, 1, 0, 2, 3], [4, 0, 5, 0, 0, 0]]


def test_config_rejects_out_of_range_values():
    for field, value in (("coef", -1.0), ("gamma", 1.5), ("malformed_cost", math.inf)):
        cfg = TrainConfig()
        setattr(cfg.algo.turn_credit, field, value)
        with pytest.raises(ConfigError, match="turn_credit"):
            validate(cfg)
    assert TrainConfig().algo.turn_credit.coef == 0.0  # off by default


# ---------------------------------------------------------------- the stage on a fake batch

# Edit-menu episodes (actions -> turns: one action per turn); G = 4, two groups.
EPISODES = [
    (["read", "malformed", "edit fix_init", "submit"], True, 1.0),
    (["read", "edit fix_init", "submit"], True, 0.0),
    (["malformed", "malformed", "read"], False, 0.0),
    (["read", "submit"], True, 0.0),
    (["read", "test", "submit"], True, 1.0),
    (["malformed", "submit"], True, 1.0),
    (["read", "read", "read", "read"], False, 0.0),
    (["submit"], True, 0.0),
]


def fake_trajectories(seed: int = 0) -> list[Trajectory]:
    """Token streams shaped like the sampler's: a prompt, then per turn 1-3 policy tokens and an
    observation of 1-2 tokens (none after the last turn)."""
    rng = random.Random(seed)
    trajectories = []
    for index, (actions, submitted, reward) in enumerate(EPISODES):
        info = EpisodeInfo(task="t", fix_op="fix_init", actions=list(actions), submitted=submitted)
        ids, mask = [1, 5, 6], [False] * 3
        for turn in range(len(actions)):
            n = rng.randint(1, 3)
            ids += [rng.randint(4, 40) for _ in range(n)]
            mask += [True] * n
            if turn < len(actions) - 1:
                m = rng.randint(1, 2)
                ids += [rng.randint(4, 40) for _ in range(m)]
                mask += [False] * m
        logp = [-rng.random() if m else 0.0 for m in mask]
        trajectories.append(Trajectory(ids, mask, logp, reward, index // 4, info))
    return trajectories


def staged(model, algo):
    """The advantage stage on fake_trajectories(); its metrics without the infrastructure mask's
    (every step logs those, 0 here: tests/test_infra_mask.py)."""
    trajectories = fake_trajectories()
    batch = collate(trajectories)
    extra = advantage_stage(batch, trajectories, algo, model)
    return batch, {key: value for key, value in extra.items() if not key.startswith("infra_")}


@pytest.fixture(scope="module")
def model(tokenizer):
    return scratch_model(tokenizer)


def test_off_leaves_the_outcome_advantages_and_the_loss_as_before(model):
    algo = AlgoConfig(group_size=4)
    batch, extra = staged(model, algo)
    rewards = torch.tensor([reward for _, _, reward in EPISODES])
    assert batch.turn_advantages is None and extra == {}
    assert torch.equal(batch.advantages, ADVANTAGES["grpo"](rewards.view(-1, 4), algo.adv_eps).reshape(-1))
    assert batch.token_advantages() is batch.advantages
    # the loss as minibatch_loss computed it before turn credit: ppo_clip_loss on advantages [B]
    weights = AGGREGATIONS[algo.loss_mode](batch.mask, algo.norm_const)
    loss, _ = minibatch_loss(model, batch, weights, algo)
    logp = token_logprobs(model, batch.ids, algo.temperature, mask=batch.mask, lengths=batch.lengths()).logp
    per_token, _ = ppo_clip_loss(RATIOS["token"](logp, batch.old_logp, batch.mask), batch.advantages, batch.mask,
                                 algo.clip_low, algo.clip_high, algo.dual_clip)
    assert torch.equal(loss, aggregate(torch.where(batch.mask > 0, per_token, 0.0), weights))


def test_on_with_zero_costs_gives_the_same_loss_bit_for_bit(model):
    off = AlgoConfig(group_size=4)
    on = dataclasses.replace(off, turn_credit=TurnCreditConfig(coef=1.0, malformed_cost=0.0, unanswered_cost=0.0))
    batch_off, _ = staged(model, off)
    batch_on, extra = staged(model, on)
    assert batch_on.turn_advantages.shape == batch_on.mask.shape and not batch_on.turn_advantages.any()
    assert extra == {"turn_reward": 0.0, "turn_adv_abs": 0.0}
    weights = AGGREGATIONS[off.loss_mode](batch_off.mask, off.norm_const)
    assert torch.equal(minibatch_loss(model, batch_off, weights, off)[0], minibatch_loss(model, batch_on, weights, on)[0])


def test_on_fills_each_policy_token_with_its_turn_advantage(model):
    algo = AlgoConfig(group_size=4, turn_credit=TurnCreditConfig(coef=2.0, malformed_cost=0.5, unanswered_cost=1.0,
                                                                 gamma=0.5))
    batch, extra = staged(model, algo)
    turns = turn_index(batch.mask)
    assert (turns.amax(1) + 1).tolist() == [len(actions) for actions, _, _ in EPISODES]
    # group 0 by hand. rewards: e0 [0, -0.5, 0, 0]; e1 [0, 0, 0]; e2 [-0.5, -0.5, -1]; e3 [0, 0]
    # returns (gamma 0.5): e0 [-0.25, -0.5, 0, 0]; e1 [0, 0, 0]; e2 [-1, -1, -1]; e3 [0, 0]
    # turn 0: e0 -0.25 - (-1/3) = 1/12; e2 -1 - (-0.25/3) = -11/12
    # turn 2: e0 0 - mean(0, -1) = 0.5; e1 0 - mean(0, -1) = 0.5; e2 -1 - 0 = -1. turn 3: e0 alone, 0
    expected = {(0, 0): 1 / 12, (2, 0): -11 / 12, (0, 2): 0.5, (1, 2): 0.5, (2, 2): -1.0, (0, 3): 0.0}
    for (row, turn), value in expected.items():
        where = turns[row] == turn
        assert where.any()
        torch.testing.assert_close(batch.turn_advantages[row][where], torch.full((int(where.sum()),), 2.0 * value))
    assert torch.equal(batch.turn_advantages[batch.mask == 0], torch.zeros(int((batch.mask == 0).sum())))
    assert extra["turn_reward"] == pytest.approx((-0.5 - 2.0 - 0.5 - 1.0) / 8)  # e0, e2, e5, e6
    # a row whose outcome advantage is 0 still trains when its turn term is not, and skips when both are 0
    rows = batch.rows(torch.tensor([2, 3]))
    rows.advantages.zero_()
    assert rows.turn_advantages[0].any()
    rows.turn_advantages[1] = 0.0
    ((busy, _), (idle, skipped)) = zero_advantage_split(rows, algo)
    assert busy.tolist() == [0] and idle.tolist() == [1] and skipped is False
    # rows() and trimming keep the per-token term aligned with the mask
    sub = batch.rows(torch.tensor([3, 7]))
    assert sub.turn_advantages.shape == sub.mask.shape
    assert torch.equal(sub.turn_advantages, batch.turn_advantages[[3, 7], : sub.mask.shape[1]])


def test_an_update_with_turn_credit_is_finite_and_moves_the_weights(model):
    import copy

    learner = copy.deepcopy(model)
    algo = AlgoConfig(group_size=4, minibatches=1, turn_credit=TurnCreditConfig(coef=1.0))
    batch, _ = staged(learner, algo)
    before = [p.detach().clone() for p in learner.parameters()]
    optimizer = torch.optim.Adam(learner.parameters(), lr=1e-3)
    metrics = policy_update(learner, optimizer, batch, algo, torch.Generator().manual_seed(0))
    assert math.isfinite(metrics["grad_norm"]) and metrics["nonfinite_skips"] == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.parameters()))


# ---------------------------------------------------------------- the tools env


@pytest.fixture(scope="module")
def sandbox():
    try:
        from bugfix_rl.sandbox import Sandbox, SandboxConfig, SandboxUnavailable
    except ImportError as error:
        pytest.skip(f"sandbox package not importable: {error}")
    try:
        box = Sandbox(SandboxConfig(workers=2))
    except SandboxUnavailable as error:
        pytest.skip(f"sandbox unavailable on this machine: {error}")
    yield box
    box.close()


def test_turns_in_the_token_stream_are_the_tools_envs_turns(sandbox):
    from bugfix_rl.gym.tasks import ALL_TASKS
    from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
    from bugfix_rl.gym.tools.vocabulary import tools_vocabulary
    from bugfix_rl.gym.agents.scripted_tools import RandomWordsPolicy, ToolsOraclePolicy
    from bugfix_rl.policy.tokenizer import SPECIALS, build_tokenizer
    from bugfix_rl.rollout.sampler import scripted_episode

    tokenizer = build_tokenizer(list(ALL_TASKS), extra_words=tools_vocabulary(ALL_TASKS))
    words = [w for w in tokenizer.words if w not in SPECIALS]
    rng = random.Random(0)
    policies = [ToolsOraclePolicy()] + [RandomWordsPolicy(rng, words) for _ in range(4)]
    malformed = 0
    for index, policy in enumerate(policies):
        env = ToolsEnv(ALL_TASKS[index], ToolsEnvConfig(max_turns=4), "pin", sandbox)
        trajectory = scripted_episode(policy, env, tokenizer)
        info = env.info
        turns = turn_index(torch.tensor(trajectory.policy_mask, dtype=torch.float)[None])
        assert int(turns.max()) + 1 == info.turns == len(info.turn_malformed)
        assert sum(info.turn_malformed) == info.malformed
        malformed += info.malformed
    assert malformed > 0  # the random turns made some


def test_one_training_step_on_the_tools_env_with_turn_credit(tmp_path):
    """The arm as the sweep runs it (scripts/turn_credit_sweep.sh), one step, from the shipped tools RL base."""
    run = tmp_path / "run"
    result = cli_result(  # in this process (tests/in_process.py)
        "train", "+exp=tools", "+ablation=turn_credit", "steps=1", "threads=1", "eval.n_val=1", "eval.n_test=1",
        "eval.heldout_n=1", "eval.shapes_n=0", "eval.test=false", "logger.console=false", "preflight=false",
        f"policy.cache_dir={tmp_path / 'cache'}", "algo.group_size=2", "algo.prompts_per_step=2",
        f"hydra.run.dir={run}")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step = rows[-1]
    assert math.isfinite(step["grad_norm"]) and step["nonfinite_skips"] == 0
    assert math.isfinite(step["turn_reward"]) and math.isfinite(step["turn_adv_abs"])
    assert json.loads((run / "eval.json").read_text())["config"]["resolved"]["algo"]["turn_credit"]["coef"] == 1.0
