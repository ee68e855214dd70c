"""The tools env's time budget per step (issue 34, class 3): per-run limits must not add up within one step.

One Bash call chains up to MAX_CHAIN sandbox runs and a turn holds up to max_calls_per_turn calls, each
run with the sandbox's own wall limit; `env.step_budget_s` bounds them all together."""

import json
import time

import pytest

from bugfix_rl.gym.tasks import task_by_name
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from in_process import cli_result
from sandboxes import start_sandbox

TASK = task_by_name("compare/under_cap")  # def under_cap(load, cap): return load < cap
SLEEP_S, TIMEOUT_S, BUDGET_S = 3.0, 4.0, 2.0  # each run sleeps under its own limit and exits 0, so && goes on
SLOW_SCRIPT = f"import time\ntime.sleep({SLEEP_S})\nprint('slept')\n"
SLOW_TESTS = (f"import time\n\n\ndef test_sleeps():\n    time.sleep({SLEEP_S})\n\n\n"
              f"def test_spins():\n    while True:\n        pass\n")
CHAIN = " && ".join(["python slow.py"] * 4)  # 4 x 3 s = 12 s under per-run limits alone


@pytest.fixture(scope="module")
def sandbox():
    with start_sandbox(workers=2, timeout_s=TIMEOUT_S) as box:
        yield box


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def make_env(sandbox, **overrides) -> ToolsEnv:
    config = ToolsEnvConfig(**overrides)
    config.step_budget_s = BUDGET_S  # set after construction: a config without the field still runs the test
    return ToolsEnv(TASK, config, "pin", sandbox)


def test_chained_long_runs_stop_at_the_step_budget(sandbox):
    env = make_env(sandbox)
    env.step_json(call("Write", file_path="slow.py", content=SLOW_SCRIPT)
                  + call("Write", file_path="test_slow.py", content=SLOW_TESTS))
    started = time.monotonic()
    texts = env.step_json(call("Bash", command=CHAIN) + call("Bash", command=CHAIN)
                          + call("Bash", command="pytest test_slow.py"))  # 24 s and more under per-run limits
    elapsed = time.monotonic() - started
    assert elapsed < BUDGET_S + 8, f"one step took {elapsed:.1f} s with a {BUDGET_S} s budget"
    assert "step time budget of 2 s spent" in texts[0], texts[0]
    assert all("step time budget of 2 s spent: command not run" in text for text in texts[1:]), texts
    assert env.info.over_budget == 3 and env.info.test_runs == 0 and not env.done
    assert env.info.metrics()["over_budget"] == 3
    compact = env.step(["Bash", "python", "slow.py"])  # the next step has its own budget, and spends it
    assert "budget" in compact.split() and env.info.over_budget == 4, compact


def test_the_step_that_ends_the_episode_keeps_time_for_grading(sandbox):
    env = make_env(sandbox, max_turns=3)
    env.step(["Read", "pin.py", ";", "Edit", "pin.py", "old", "<", "new", "<="])  # the fix
    env.step_json(call("Write", file_path="slow.py", content=SLOW_SCRIPT))
    started = time.monotonic()
    texts = env.step_json(call("Bash", command=CHAIN))  # the last turn: its runs get half the budget
    elapsed = time.monotonic() - started
    assert env.done and env.reward == 1.0 and env.info.hidden_pass  # graded in full after the cut runs
    assert elapsed < BUDGET_S + 8 and "step time budget of 1 s spent" in texts[0], (elapsed, texts)


def test_normal_steps_do_not_touch_the_budget(sandbox):
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin", sandbox)  # the default budget
    started = time.monotonic()
    text = env.step(["Bash", "pytest", "&&", "python", "test_pin.py"])
    assert time.monotonic() - started < 2 and "budget" not in text and env.info.over_budget == 0


def test_a_budget_that_is_not_positive_is_a_config_error():
    result = cli_result("train", "env=tools", "env.step_budget_s=0")  # in this process (tests/in_process.py)
    assert result.returncode == 2 and "env.step_budget_s must be > 0" in result.stderr, result.stderr
