"""The tools env's leak canary (issue 34): a hidden-only input in an observation flags the episode and
pays 0; the model's own text does not count, and the scripted oracle never trips it."""

import json
import random

import pytest

from bugfix_rl.gym.agents.scripted_tools import ToolsOraclePolicy
from bugfix_rl.gym.edit_menu import RENAME_POOL
from bugfix_rl.gym.shape_variants import shape_variant
from bugfix_rl.gym.tasks import (
    ALL_OPS, OPERAND_POOL, SPLITS, make_tasks, operand_names, task_by_name, with_renamed_operands,
)
from bugfix_rl.gym.tools.code_words import code_to_words
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from bugfix_rl.gym.tools.leaks import hidden_input_canaries
from bugfix_rl.gym.tools.repo import apply_op_or_none, make_repo
from bugfix_rl.gym.tools.vocabulary import tools_vocabulary
from bugfix_rl.policy.tokenizer import build_tokenizer
from bugfix_rl.rollout.sampler import scripted_episode
from sandboxes import start_sandbox

TASK = task_by_name("compare/under_cap")  # def under_cap(load, cap): return load < cap; hidden (29, 30), ...
FIX = ["Read", "pin.py", ";", "Edit", "pin.py", "old", "<", "new", "<="]
HIDDEN = "(29, 30)"  # a hidden input of TASK that no public test has
# model code that prints the hidden input without writing it (as if read through a side channel)
SIDE_CHANNEL = f"print('pin' + bytes.fromhex({HIDDEN.encode().hex()!r}).decode())\n"


@pytest.fixture(scope="module")
def sandbox():
    with start_sandbox(workers=2) as box:
        yield box


class LeakyGrader:
    """The real sandbox, except that every test run's output carries the inputs of the last grading
    job, as a sandbox that let one job read another's would."""

    def __init__(self, sandbox):
        self.sandbox, self.inputs = sandbox, []

    def run_tests(self, files, command, timeout_s=None):
        result = self.sandbox.run_tests(files, command, timeout_s=timeout_s)
        return type(result)(result.stdout + f"{self.inputs}\n", result.exit_code, result.status, result.duration_s)

    def map_call_function(self, jobs):
        self.inputs = [args for job in jobs for args in job[3]]
        return self.sandbox.map_call_function(jobs)


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_canaries_are_hidden_inputs_found_in_no_public_test_and_no_repo_text():
    for task in make_tasks("all"):
        canaries = hidden_input_canaries(task)
        assert canaries, task.name
        repo = make_repo(task, task.fn_name)
        texts = list(repo.values()) + [apply_op_or_none(task, repo[f"{task.fn_name}.py"], op) or "" for op in ALL_OPS]
        words = " " + " ".join(" ".join(code_to_words(text)) for text in texts) + " "
        assert not [text for text in canaries if f" {text} " in words], task.name
    assert "( 29 , 30 )" in hidden_input_canaries(TASK) and "( 30 , 30 )" not in hidden_input_canaries(TASK)


def test_a_run_that_prints_a_hidden_input_is_flagged_and_pays_0(sandbox):
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin", sandbox)
    env.step(FIX)  # the right fix: hidden tests pass
    (_, shown) = env.step_json(call("Write", file_path="leak.py", content=SIDE_CHANNEL)
                               + call("Bash", command="python leak.py"))
    assert shown == f"pin{HIDDEN}" and env.info.leaked_input == "( 29 , 30 )"
    env.step([])
    assert env.done and env.info.hidden_pass and env.reward == 0.0
    assert env.info.metrics()["leaked"] == 1.0 and env.info.metrics()["pass_rate"] == 1.0  # the verdict stays


@pytest.mark.parametrize("front_end", ["compact", "json"])
def test_a_grading_job_leaking_into_a_later_run_is_flagged(sandbox, front_end):
    leaky = LeakyGrader(sandbox)
    first = ToolsEnv(TASK, ToolsEnvConfig(), "pin", leaky)
    first.step([])  # graded: the next run's output carries its hidden inputs
    assert not first.info.leaked_input and first.reward == 0.0  # the bug is not fixed, and nothing leaked
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin", leaky)
    env.step(FIX)
    if front_end == "compact":  # a script run: the compact view keeps only E lines of a test run
        assert "( 29 , 30 )" in env.step(["Bash", "python", "pin.py"])
    else:
        env.step_json(call("Bash", command="pytest"))
    env.step([])
    assert env.info.leaked_input and env.info.hidden_pass and env.reward == 0.0
    quiet = ToolsEnv(TASK, ToolsEnvConfig(leak_canary=False), "pin", leaky)
    quiet.step(FIX)
    quiet.step(["Bash", "python", "pin.py"])
    quiet.step([])
    assert not quiet.info.leaked_input and quiet.reward == 1.0


def test_the_models_own_text_is_no_leak(sandbox):
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin", sandbox)
    env.step(FIX)
    texts = env.step_json(call("Write", file_path="test_edge.py",
                               content=f"from pin import pin\n\n\ndef test_edge():\n    assert not pin{HIDDEN}\n")
                          + call("Bash", command="pytest test_edge.py") + call("Read", file_path="test_edge.py"))
    assert f"pin{HIDDEN}" in texts[1] and f"pin{HIDDEN}" in texts[2]  # its own edge case, failing, then read back
    env.step([])
    assert not env.info.leaked_input and env.reward == 1.0 and env.info.metrics()["leaked"] == 0.0


def test_a_solved_episode_is_not_flagged(sandbox):
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin", sandbox)
    env.step(FIX + [";", "Bash", "pytest"])
    env.step_json(call("Bash", command="pytest -v") + call("Bash", command="cat pin.py test_pin.py"))
    env.step([])
    assert env.info.hidden_pass and not env.info.leaked_input and env.reward == 1.0


def test_the_oracle_never_trips_the_canary_on_any_task_of_any_split(sandbox):
    tokenizer = build_tokenizer(make_tasks("all"), extra_words=tools_vocabulary(make_tasks("all")))
    rng = random.Random(34)
    tasks = {task.name: task for split in SPLITS for task in make_tasks(split)}  # 'all' holds every split's
    copies = [with_renamed_operands(task, rng.sample(OPERAND_POOL, len(operand_names(task))), "c")
              for task in tasks.values()]
    variants = [shape_variant(task, rng) for task in make_tasks("train")]
    for task in [*tasks.values(), *copies, *filter(None, variants)]:
        name = rng.choice((task.fn_name,) + RENAME_POOL)
        env = ToolsEnv(task, ToolsEnvConfig(), name, sandbox)
        trajectory = scripted_episode(ToolsOraclePolicy(), env, tokenizer)
        assert not env.info.leaked_input and trajectory.reward == 1.0, (task.name, env.info.leaked_input)
