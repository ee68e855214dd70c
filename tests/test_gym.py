"""The gym is sound: every op on every family, the oracle, blind guessing, the exploit, the env rules."""

from __future__ import annotations

import random

import pytest

from bugfix_rl.gym.agents.scripted import OraclePolicy, RandomOpPolicy
from bugfix_rl.gym.edit_menu import RENAME_POOL, EditMenuConfig, EditMenuEnv, parse_call
from bugfix_rl.gym.ops import code_states
from bugfix_rl.gym.tasks import ALL_TASKS, FAMILIES, FIX_OPS, make_tasks
from bugfix_rl.rollout.sampler import scripted_episode


def test_task_counts_and_fixed_split():
    assert len(make_tasks("train")) == 20 and len(make_tasks("heldout")) == 10
    for family in FAMILIES:
        assert sum(t.family == family for t in make_tasks("train")) == 4
        assert sum(t.family == family for t in make_tasks("heldout")) == 2
    assert [t.name for t in make_tasks("val")] == [
        "minmax/pin", "range/series", "compare/qualifies", "zero/share", "init/product_upto"]
    assert [t.name for t in make_tasks("test")] == [
        "minmax/saturate", "range/step_total", "compare/under_cap", "zero/speed", "init/add_threes"]


def test_heldout_operands_never_seen_in_training():
    import re

    def names(task):
        return set(re.findall(r"[A-Za-z_]\w*", task.source)) - {task.fn_name}

    train_words = set().union(*(names(t) for t in make_tasks("train")))
    keywords = {"def", "return", "for", "in", "range", "min", "max", "while", "if"}
    for task in make_tasks("heldout"):
        assert not (names(task) - keywords) & train_words, task.name


@pytest.mark.parametrize("task", ALL_TASKS, ids=lambda t: t.name)
def test_each_op_on_each_task(task):
    states = code_states(task)
    assert not states[None].hidden_pass and states[None].public_pass < 1.0
    for op in FIX_OPS:
        state = states[op]
        if op == task.fix_op:
            assert state is not None and state.hidden_pass and state.public_pass == 1.0
        else:
            assert state is None or not state.hidden_pass, op
    exploit = states["hardcode_tests"]
    assert exploit.public_pass == 1.0 and not exploit.hidden_pass


def _run(policy_cls, tasks, episodes, config=EditMenuConfig(), seed=0):
    rng = random.Random(seed)
    rewards = []
    for task in tasks:
        for _ in range(episodes):
            env = EditMenuEnv(task, config, rng.choice(RENAME_POOL))
            policy = policy_cls(rng)
            observation = env.reset()
            while not env.done:
                observation = env.step(policy(observation))
            rewards.append(env.reward)
    return sum(rewards) / len(rewards)


def test_oracle_solves_every_task():
    assert _run(OraclePolicy, make_tasks("all"), 2) == 1.0


def test_random_op_policy_scores_about_one_in_five():
    rate = _run(RandomOpPolicy, make_tasks("all"), 60)
    assert 0.16 < rate < 0.24, rate


def test_rename_hides_the_function_name(tokenizer):
    task = make_tasks("train")[0]
    env = EditMenuEnv(task, EditMenuConfig(), "orbit")
    assert "orbit" in env.reset() and task.fn_name not in env.reset()
    assert "def orbit (" in env.step(["read"])
    plain = EditMenuEnv(task, EditMenuConfig(rename=False), "orbit")
    assert task.fn_name in plain.reset()


def test_edit_budget_malformed_calls_and_turn_limit():
    task = make_tasks("train")[0]
    env = EditMenuEnv(task, EditMenuConfig(), "orbit")
    env.reset()
    assert env.step(["edit", "fix_init"]) == "no change"
    assert env.step(["edit", task.fix_op]) == "error : edit budget used"
    assert env.step(["read", "read"]) == "error : malformed call"
    assert env.step(None) == "error : malformed call"
    assert env.info.malformed == 2 and env.info.edits == 1
    env.step(["test"])
    assert not env.done
    env.step(["test"])
    assert env.done and env.reward == 0.0 and env.info.turns == 6


def test_reward_needs_submit_and_public_mode_pays_the_exploit():
    task = make_tasks("heldout")[0]
    hidden = EditMenuEnv(task, EditMenuConfig(), "nova")
    hidden.step(["edit", task.fix_op])
    assert hidden.reward == 0.0  # not submitted yet
    hidden.step(["submit"])
    assert hidden.done and hidden.reward == 1.0
    for reward_mode, expected in (("hidden", 0.0), ("public", 1.0)):
        env = EditMenuEnv(task, EditMenuConfig(reward=reward_mode), "nova")
        env.step(["edit", "hardcode_tests"])
        env.step(["submit"])
        assert env.reward == expected and env.info.exploit


def test_second_edit_allowed_when_budget_is_two():
    task = make_tasks("train")[0]
    env = EditMenuEnv(task, EditMenuConfig(max_edits=2), "nova")
    assert env.step(["edit", "fix_init"]) == "no change"
    assert env.step(["edit", task.fix_op]) == "ok"
    env.step(["submit"])
    assert env.reward == 1.0


def test_parse_call():
    assert parse_call(["read"]) == ("read", None)
    assert parse_call(["edit", "swap_minmax"]) == ("edit", "swap_minmax")
    for bad in ([], ["edit"], ["edit", "read"], ["submit", "now"], ["fix_init"], None):
        assert parse_call(bad) is None


def test_scripted_episode_tokens_round_trip(tokenizer):
    task = make_tasks("val")[2]
    traj = scripted_episode(OraclePolicy(), EditMenuEnv(task, EditMenuConfig(), "zeta"), tokenizer)
    assert traj.reward == 1.0
    text = tokenizer.decode(traj.ids)
    assert text.startswith("<bos> issue : zeta returns wrong results <eoo> read <eoa> def zeta (")
    actions = tokenizer.decode([i for i, m in zip(traj.ids, traj.policy_mask) if m])
    assert actions == "read <eoa> edit fix_comparison <eoa> test <eoa> submit <eoa>"
