"""Masking episodes whose reward the infrastructure decided (issue 39): the masked estimators against
hand-computed numbers and against the same groups with the failed episodes removed, the advantage
stage, the stop rule, the sandbox's fault hook, and a tools training run with faults injected."""

from __future__ import annotations

import json
import math
import random
from types import SimpleNamespace

import pytest
import torch
from in_process import cli_result

from bugfix_rl.algo.advantage_stage import advantage_stage
from bugfix_rl.algo.advantages import ADVANTAGES
from bugfix_rl.algo.infra_mask import MASKED_ADVANTAGES, kept_episodes, reward_lost
from bugfix_rl.config import AlgoConfig, StopConfig
from bugfix_rl.evaluate.evaluate import infra_failed
from bugfix_rl.rollout.env_errors import infrastructure_failure
from bugfix_rl.run.stopping import stop_reason
from bugfix_rl.types import Trajectory, collate
from tests.sandboxes import start_sandbox

# one success, two failures, and a fourth episode lost to the sandbox (its 0 is not a failure)
GROUP = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
LAST_FAILED = torch.tensor([[True, True, True, False]])


def test_masked_estimators_by_hand():
    # kept [1, 0, 0]: mean 1/3, centred [2/3, -1/3, -1/3], population std sqrt(2)/3
    grpo = MASKED_ADVANTAGES["grpo"](GROUP, LAST_FAILED, 0.0)
    torch.testing.assert_close(grpo, torch.tensor([[math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2), 0.0]],
                                                  dtype=torch.float64))
    dr = MASKED_ADVANTAGES["dr_grpo"](GROUP, LAST_FAILED, 0.0)
    torch.testing.assert_close(dr, torch.tensor([[2 / 3, -1 / 3, -1 / 3, 0.0]], dtype=torch.float64))
    rloo = MASKED_ADVANTAGES["rloo"](GROUP, LAST_FAILED, 0.0)  # 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -1/2
    torch.testing.assert_close(rloo, torch.tensor([[1.0, -0.5, -0.5, 0.0]], dtype=torch.float64))
    # unmasked, the lost episode would have been a failure: rloo 1 and -1/3 instead
    torch.testing.assert_close(ADVANTAGES["rloo"](GROUP, 0.0), torch.tensor([[1.0, -1 / 3, -1 / 3, -1 / 3]],
                                                                          dtype=torch.float64))


def test_a_group_left_with_one_episode_drops_out():
    rewards = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 1.0]])
    valid = torch.tensor([[True, False, False], [True, True, True]])
    assert kept_episodes(valid).tolist() == [[False, False, False], [True, True, True]]
    for name, fn in MASKED_ADVANTAGES.items():
        advantages = fn(rewards, valid, 1e-6)
        assert advantages[0].tolist() == [0.0, 0.0, 0.0], name
        assert torch.isfinite(advantages).all() and advantages[1].abs().sum() > 0, name


def test_reinforce_pp_masked_by_hand():
    # group 1 kept [1, 0] -> centred [0.5, -0.5]; group 2 kept [1, 1, 0] -> [1/3, 1/3, -2/3];
    # the five kept centred values have mean 0 and population variance (0.5 + 2/3) / 5 = 7/30
    rewards = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    valid = torch.tensor([[True, True, False], [True, True, True]])
    std = math.sqrt(7 / 30)
    expected = torch.tensor([[0.5, -0.5, 0.0], [1 / 3, 1 / 3, -2 / 3]], dtype=torch.float64) / std
    torch.testing.assert_close(MASKED_ADVANTAGES["reinforce_pp"](rewards, valid, 0.0), expected)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_masked_equals_the_group_with_the_failed_episodes_removed(name):
    generator = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 2, (64, 8), generator=generator).double() + 0.1 * torch.rand(64, 8, generator=generator,
                                                                                            dtype=torch.float64)
    rewards[::5] = 1.0  # some groups where every kept episode agrees
    valid = torch.rand(64, 8, generator=generator) > 0.3
    masked = MASKED_ADVANTAGES[name](rewards, valid, 1e-6)
    for row in range(64):
        keep = valid[row]
        if int(keep.sum()) < 2:
            assert masked[row].abs().sum() == 0
            continue
        removed = ADVANTAGES[name](rewards[row, keep][None], 1e-6)[0]  # the group without the failed episodes
        torch.testing.assert_close(masked[row, keep], removed, rtol=1e-12, atol=1e-12)
        assert masked[row, ~keep].abs().sum() == 0


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "reinforce_pp"])
def test_one_failure_per_group_equals_the_batch_of_smaller_groups(name):
    """Each group of 6 loses one episode: the masked batch equals the unmasked estimator on [N, 5]
    (reinforce_pp's batch std included, which no per-group loop could check)."""
    generator = torch.Generator().manual_seed(1)
    rewards = torch.randint(0, 2, (32, 6), generator=generator).double()
    failed = torch.randint(0, 6, (32,), generator=generator)
    valid = torch.ones(32, 6, dtype=torch.bool)
    valid[torch.arange(32), failed] = False
    masked = MASKED_ADVANTAGES[name](rewards, valid, 1e-6)
    removed = ADVANTAGES[name](rewards[valid].view(32, 5), 1e-6)
    torch.testing.assert_close(masked[valid].view(32, 5), removed, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "reinforce_pp"])
def test_nothing_masked_gives_the_unmasked_estimator(name):
    rewards = torch.rand(16, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64).round()
    valid = torch.ones(16, 8, dtype=torch.bool)
    torch.testing.assert_close(MASKED_ADVANTAGES[name](rewards, valid, 1e-6), ADVANTAGES[name](rewards, 1e-6),
                               rtol=1e-12, atol=1e-12)


def test_reward_lost_by_hand():
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0]])  # valid mean 2/3 against 1/2 over all
    assert reward_lost(rewards, torch.tensor([[True, True, True, False]])) == pytest.approx(1 / 6)
    assert reward_lost(rewards, torch.ones(1, 4, dtype=torch.bool)) == 0.0


def test_which_failures_are_the_infrastructures():
    assert infrastructure_failure(SimpleNamespace(env_error="OSError: gone", grade_flags=frozenset())) == "env_error"
    assert infrastructure_failure(SimpleNamespace(env_error="", grade_flags=frozenset({"sandbox_error"}))) \
        == "sandbox_error"
    for flags in (frozenset(), frozenset({"timeout"}), frozenset({"crash", "non_plain_output"})):
        assert infrastructure_failure(SimpleNamespace(env_error="", grade_flags=flags)) == ""  # the model's doing
    assert infrastructure_failure(SimpleNamespace(env_error="")) == ""  # the edit menu has no grader flags


def _episode(reward: float, policy_tokens: int, failure: str = "") -> Trajectory:
    info = SimpleNamespace(env_error="", grade_flags=frozenset({failure} if failure else ()))
    ids = list(range(1, policy_tokens + 3))
    mask = [False, False] + [True] * policy_tokens
    return Trajectory(ids, mask, [0.0] * len(ids), reward, 0, info)


def test_the_advantage_stage_masks_and_reports():
    algo = AlgoConfig(group_size=4, adv_mode="rloo")
    episodes = [_episode(1.0, 3), _episode(0.0, 2), _episode(0.0, 4), _episode(0.0, 3, "sandbox_error"),
                _episode(1.0, 2), _episode(0.0, 2, "sandbox_error"), _episode(0.0, 2, "sandbox_error"),
                _episode(0.0, 5, "sandbox_error")]
    batch = collate(episodes)
    model = SimpleNamespace(cfg=SimpleNamespace(max_len=64))
    extra = advantage_stage(batch, episodes, algo, model)
    torch.testing.assert_close(batch.advantages, torch.tensor([1.0, -0.5, -0.5, 0, 0, 0, 0, 0]))
    assert batch.mask[3].sum() == 0 and batch.mask[4:].sum() == 0  # failed, and the group that dropped out
    assert batch.mask[:3].sum() == 9
    assert extra["infra_masked"] == 4 and extra["infra_groups_dropped"] == 1 and extra["infra_share"] == 0.5
    assert extra["infra_reward_lost"] == pytest.approx(2 / 4 - 2 / 8)

    unmasked = collate(episodes)
    off = advantage_stage(unmasked, episodes, AlgoConfig(group_size=4, adv_mode="rloo", mask_infra=False), model)
    assert off["infra_masked"] == 0 and unmasked.advantages[3] == pytest.approx(-1 / 3)


def test_the_stop_rule_past_the_share():
    rows = [{"step": 0, "infra_share": 0.1, "infra_masked": 1}]
    assert stop_reason(StopConfig(max_infra_share=0.2), {}, rows, False) is None
    rows.append({"step": 1, "infra_share": 0.25, "infra_masked": 8})
    reason = stop_reason(StopConfig(max_infra_share=0.2), {}, rows, False)
    assert reason.startswith("infrastructure: 8 episodes (25%) of step 1")
    assert stop_reason(StopConfig(max_infra_share=1.0), {}, rows, False) is None


def test_the_sandbox_fault_hook_answers_sandbox_error_for_gradings_only():
    from bugfix_rl.sandbox import grade

    source = "def f(x):\n    return x + 1\n"
    cases = [((1,), 2), ((2,), 3)]
    with start_sandbox(workers=1) as sandbox:
        assert grade(sandbox, source, "m", "f", cases).all_passed
        sandbox.inject_grading_faults(1.0)
        failed = grade(sandbox, source, "m", "f", cases)
        assert failed.status == "sandbox_error" and "sandbox_error" in failed.flags and not any(failed.passed)
        assert sandbox.run_tests({"m.py": source}, "python m.py").status == "ok"  # test runs untouched
        sandbox.inject_grading_faults(0.3, seed=5)
        hits = sum(grade(sandbox, source, "m", "f", cases).status == "sandbox_error" for _ in range(40))
        expected_stream = random.Random(5)
        assert hits == sum(expected_stream.random() < 0.3 for _ in range(40))
        sandbox.inject_grading_faults(0.0)
        assert grade(sandbox, source, "m", "f", cases).all_passed


def test_real_tools_episodes_with_injected_faults_train_as_if_removed():
    """Tools episodes of a scripted noisy agent, graded by a sandbox that fails 10% of gradings (the
    env factory's hook, env.infra_fault_rate): the stage's advantages equal each group's without them."""
    from bugfix_rl.config import EnvConfig
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.gym.tasks import ALL_TASKS
    from bugfix_rl.gym.tools.vocabulary import tools_vocabulary
    from bugfix_rl.gym.agents.scripted_tools import NoisyToolsPolicy
    from bugfix_rl.policy.tokenizer import build_tokenizer
    from bugfix_rl.rollout.sampler import scripted_episode

    start_sandbox(workers=1).close()  # skips where no sandbox can start
    tokenizer = build_tokenizer(list(ALL_TASKS), extra_words=tools_vocabulary(ALL_TASKS))
    make_env, close = make_env_factory(EnvConfig(name="tools", max_turns=4, infra_fault_rate=0.1))
    rng = random.Random(3)
    G, groups = 4, 16
    try:
        episodes = []
        for index in range(groups):
            task = ALL_TASKS[index]
            for _ in range(G):
                env = make_env(task, "pin")
                memory = [ALL_TASKS[index + 1]]  # a wrong task's code, for the edits made without reading
                episode = scripted_episode(NoisyToolsPolicy(rng, memory, p_read=0.9, p_right_after_read=0.6), env,
                                           tokenizer)
                episode.reward = env.reward
                episodes.append(episode)
    finally:
        close()
    failed = torch.tensor([infrastructure_failure(t.info) == "sandbox_error" for t in episodes])
    assert 0 < int(failed.sum()) < 16  # 10% of 64 gradings, from the hook's seeded stream
    assert infra_failed(episodes) == int(failed.sum())  # what an evaluation's eval.json reports
    algo = AlgoConfig(group_size=G, adv_mode="grpo")
    batch = collate(episodes, tokenizer.pad_id)
    extra = advantage_stage(batch, episodes, algo, SimpleNamespace(cfg=SimpleNamespace(max_len=512)))
    assert extra["infra_masked"] == int(failed.sum())
    rewards = torch.tensor([t.reward for t in episodes]).view(groups, G)
    advantages = batch.advantages.view(groups, G)
    informative = [row for row, lost in enumerate(failed.view(groups, G)) if lost.any()
                   and advantages[row].abs().sum() > 0]
    assert informative, "no group with a lost episode kept a learning signal: the check would be empty"
    for row, lost in enumerate(failed.view(groups, G)):
        keep = ~lost
        expected = ADVANTAGES["grpo"](rewards[row, keep][None], algo.adv_eps)[0] if int(keep.sum()) >= 2 else 0.0
        torch.testing.assert_close(advantages[row, keep], torch.as_tensor(expected).expand(int(keep.sum())))
        assert advantages[row, lost].abs().sum() == 0


def test_a_tools_run_with_a_tenth_of_gradings_failing_logs_infra_masked(tmp_path):
    run = tmp_path / "run"
    result = cli_result(  # in this process (tests/in_process.py)
        "train", "+exp=tools", "steps=2", "threads=1", "eval.n_val=1", "eval.heldout_n=0", "eval.shapes_n=0",
        "eval.test=false", "logger.console=false", "preflight=false",
        f"policy.cache_dir={tmp_path / 'cache'}",  # empty: the shipped tools base is loaded
        "algo.group_size=4", "algo.prompts_per_step=4", "env.infra_fault_rate=0.1", f"hydra.run.dir={run}")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all("infra_masked" in row and "infra_reward_lost" in row for row in rows)
    assert sum(row["infra_masked"] for row in rows) > 0
    assert all(row["infra_share"] == row["infra_masked"] / 16 for row in rows)


def _turn_episode(reward: float, turns_malformed: list[int], submitted: bool, failure: str = "") -> Trajectory:
    """An episode of len(turns_malformed) turns (two policy tokens each, one observation token between)."""
    info = SimpleNamespace(env_error="", grade_flags=frozenset({failure} if failure else ()),
                           turn_malformed=turns_malformed, submitted=submitted)
    mask = [False]
    for _ in turns_malformed:
        mask += [True, True, False]
    ids = list(range(1, len(mask) + 1))
    return Trajectory(ids, mask, [0.0] * len(ids), reward, 0, info)


def test_turn_credit_leaves_the_failed_episode_out_of_every_turns_baseline():
    from bugfix_rl.config import TurnCreditConfig

    turn_credit = TurnCreditConfig(coef=1.0, malformed_cost=0.5, unanswered_cost=1.0, gamma=0.5)
    kept = [_turn_episode(1.0, [0, 1], True), _turn_episode(0.0, [1, 1, 0], False), _turn_episode(0.0, [0], True)]
    failed = _turn_episode(0.0, [2, 2, 2, 2], False, "sandbox_error")  # would weigh on turns 0-3 of the others
    model = SimpleNamespace(cfg=SimpleNamespace(max_len=64))
    masked = collate(kept + [failed])
    advantage_stage(masked, kept + [failed], AlgoConfig(group_size=4, adv_mode="rloo", turn_credit=turn_credit), model)
    removed = collate(kept)
    advantage_stage(removed, kept, AlgoConfig(group_size=3, adv_mode="rloo", turn_credit=turn_credit), model)
    width = removed.turn_advantages.shape[1]
    torch.testing.assert_close(masked.turn_advantages[:3, :width], removed.turn_advantages)
    assert masked.turn_advantages[:3, width:].abs().sum() == 0 and masked.turn_advantages[3].abs().sum() == 0
    torch.testing.assert_close(masked.advantages[:3], removed.advantages)
