"""The reward switches of the design review (questions 8, 9, 11, 12, 13) against hand-computed values,
in the edit menu and the tools env, and one smoke training step with each."""

import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from scripted_draws import Scripted

from bugfix_rl.gym.edit_menu import EditMenuConfig, EditMenuEnv, hidden_only_texts
from bugfix_rl.gym.ops import code_states
from bugfix_rl.gym.rewards import RewardSpec, base_reward, episode_reward, flipped
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.rollout.env_errors import HiddenTestLeak, check_batch

ROOT = Path(__file__).resolve().parents[1]


def test_base_reward_modes_by_hand():
    hidden, public = [True, True, False], [True, True]
    assert base_reward("hidden", hidden, public, 0.1) == 0.0
    assert base_reward("public", hidden, public, 0.1) == 1.0
    assert base_reward("partial", hidden, public, 0.1) == pytest.approx(2 / 3)
    assert base_reward("mixed", hidden, public, 0.1) == pytest.approx(0.1 * 2 / 3)
    assert base_reward("mixed", [True] * 3, public, 0.1) == pytest.approx(1.1)  # full success dominates


def test_flaky_outcomes_flip_where_the_draw_is_below_the_rate():
    assert flipped([True, False, True], 0.1, Scripted([0.05, 0.5, 0.09])) == [False, False, False]
    assert flipped([True, False], 0.0, Scripted([])) == [True, False]  # no draws at rate 0
    # one test, reward = verdict: E[reward] = f + (1 - 2f) p (question 9); p = 1 here, f = 0.04
    rng = random.Random(0)
    spec = RewardSpec(flaky_rate=0.04)
    mean = sum(episode_reward(spec, True, [True], [True], 0, rng) for _ in range(20_000)) / 20_000
    assert mean == pytest.approx(0.96, abs=0.005)


def test_step_penalty_and_ungraded_episodes_by_hand():
    spec = RewardSpec(step_penalty=0.02)
    assert episode_reward(spec, True, [True], [True], 3, random.Random(0)) == pytest.approx(1 - 0.06)
    assert episode_reward(spec, False, [True], [True], 1, random.Random(0)) == pytest.approx(-0.02)  # q12's submit
    with pytest.raises(ValueError, match="flaky_rate"):
        RewardSpec(flaky_rate=0.7)
    with pytest.raises(ValueError, match="unknown truncation"):
        RewardSpec(truncation="maybe")


def test_edit_menu_partial_mixed_and_penalty_on_a_real_task():
    task = make_tasks("train")[0]  # minmax/clamp: 7 hidden tests
    results = code_states(task)[None].hidden_results
    fraction = sum(results) / len(results)
    for mode, expected in (("partial", fraction), ("mixed", 0.1 * fraction), ("hidden", 0.0)):
        env = EditMenuEnv(task, EditMenuConfig(reward=mode), "nova")
        env.step(["submit"])  # the buggy code, submitted at once
        assert env.reward == pytest.approx(expected) and not env.info.success
    env = EditMenuEnv(task, EditMenuConfig(step_penalty=0.2), "nova")
    env.step(["read"])
    env.step(["edit", task.fix_op])
    env.step(["submit"])
    assert env.reward == pytest.approx(1 - 0.6) and env.info.success


def test_truncation_grade_pays_a_fix_that_was_never_submitted():
    task = make_tasks("train")[0]
    for mode, reward in (("zero", 0.0), ("grade", 1.0)):
        env = EditMenuEnv(task, EditMenuConfig(truncation=mode, max_turns=3), "nova")
        for words in (["read"], ["edit", task.fix_op], ["test"]):  # the turn budget ends it unsubmitted
            env.step(words)
        assert env.done and env.reward == reward and env.info.success == (mode == "grade")


def test_flaky_env_reward_is_fixed_per_episode_and_set_by_its_seed():
    task = make_tasks("train")[0]
    rewards = []
    for seed in range(200):
        env = EditMenuEnv(task, EditMenuConfig(flaky_rate=0.3), "nova")
        env.seed(seed)
        env.step(["edit", task.fix_op])
        env.step(["submit"])
        assert env.reward == env.reward and env.info.success  # read twice, same value; success stays true
        rewards.append(env.reward)
    # 7 hidden tests all must pass after flips: P(reward 1) = 0.7^7 = 0.082
    assert 0.03 < sum(rewards) / 200 < 0.15


def test_leakage_canary_stops_a_batch_whose_observation_shows_a_hidden_test():
    task = make_tasks("train")[0]
    canaries = hidden_only_texts(task)
    assert canaries and all(text not in code_states(task)[None].test_report for text in canaries)
    env = EditMenuEnv(task, EditMenuConfig(), "nova")
    env.step(["test"])  # the real report: public tests only
    assert env.info.leaked == ""
    leaky = EditMenuEnv(task, EditMenuConfig(), "nova")  # an env bug: the report shows a hidden input
    leaky.state = type(leaky.state)(**{**leaky.state.__dict__, "test_report": "pass " + canaries[0]})
    leaky.step(["test"])
    assert leaky.info.leaked == canaries[0]
    with pytest.raises(HiddenTestLeak, match="leakage canary"):
        check_batch([SimpleNamespace(info=env.info), SimpleNamespace(info=leaky.info)])
    quiet = EditMenuEnv(task, EditMenuConfig(leak_canary=False), "nova")
    quiet.state = leaky.state
    quiet.step(["test"])
    assert quiet.info.leaked == ""


def test_tools_env_reward_switches():
    from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
    from bugfix_rl.sandbox import Sandbox, SandboxConfig

    task = make_tasks("train")[0]
    sandbox = Sandbox(SandboxConfig())
    try:
        rewards = {}
        for name, config in (("partial", ToolsEnvConfig(reward="partial")),
                             ("penalty", ToolsEnvConfig(step_penalty=0.25))):
            env = ToolsEnv(task, config, "nova", sandbox)
            env.step_json("I am done.")  # a turn without calls: the final answer, the buggy file graded
            rewards[name] = env.reward
            assert env.done and not env.info.success
        results = code_states(task)[None].hidden_results
        assert rewards["partial"] == pytest.approx(sum(results) / len(results))
        assert rewards["penalty"] == pytest.approx(-0.25)  # 0 for the unfixed file, one turn at 0.25
    finally:
        sandbox.close()


SWITCHES = ["env.reward=partial", "env.reward=mixed", "env.flaky_rate=0.1", "env.step_penalty=0.05",
            "env.truncation=grade"]


# slow: each switch also trains a step, and changes the parameters, as an arm of +exp=ablation
# (tests/test_experiments.py::test_ablation_arm_runs_one_step_and_learns: partial, mixed, flaky, step_penalty, grade)
@pytest.mark.slow
@pytest.mark.parametrize("switch", SWITCHES)
def test_one_training_step_with_each_switch(switch, tmp_path):
    script = str(Path(sys.executable).with_name("bugfix-rl"))
    result = subprocess.run([script, "train", "+exp=smoke", switch, "steps=1", "preflight=false", "eval.test=false",
                             "threads=1", f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, timeout=600,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "eval.json").is_file()


def test_bad_switch_values_are_one_line_errors(tmp_path, capsys):
    from bugfix_rl import cli

    for args, message in ((["env.reward=dense"], "env.reward=dense is not allowed"),
                          (["env.flaky_rate=0.9"], "env.flaky_rate must lie in"),
                          (["env=tools", "env.truncation=grade"], "env.truncation is an edit-menu switch")):
        with pytest.raises(SystemExit) as exit_info:  # in process: an uncaught error would fail the test
            cli.main(["train", *args, f"hydra.run.dir={tmp_path}"])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, (args, err)
        assert not any(tmp_path.iterdir())  # refused before Hydra made the run dir


def test_episode_diagnostics_and_log_ratio_summary_by_hand():
    import torch

    from bugfix_rl.algo.update import log_ratio_summary
    from bugfix_rl.present.dashboard import episode_diagnostics

    def episode(submitted, hidden, public, turns):
        info = SimpleNamespace(submitted=submitted, graded=False, hidden_pass=hidden, public_pass=public,
                               turns=turns, success=submitted and hidden, env_error="")
        return SimpleNamespace(info=info)

    row = episode_diagnostics([episode(True, True, 1.0, 3), episode(True, False, 1.0, 2),  # the exploit
                               episode(True, False, 0.5, 4), episode(False, False, 0.0, 6)])
    assert row["public_hidden_gap"] == pytest.approx((2 - 1) / 3)  # 3 graded: 2 pass public, 1 hidden
    assert (row["length_pass_p50"], row["length_pass_p90"]) == (3.0, 3.0)
    assert row["length_fail_p50"] == 4.0 and row["length_fail_p90"] == pytest.approx(4 + 0.8 * 2)  # [2, 4, 6]: position 1.8
    assert episode_diagnostics([])["public_hidden_gap"] is None
    summary = log_ratio_summary([torch.zeros(3), torch.tensor([0.5, 0.1])])  # |log r| per token
    assert summary["log_ratio_abs_max"] == 0.5 and summary["log_ratio_abs_p50"] == 0.0
    assert summary["log_ratio_abs_p99"] == pytest.approx(0.1 + 0.96 * 0.4)  # position 3.96 of [0,0,0,.1,.5]
