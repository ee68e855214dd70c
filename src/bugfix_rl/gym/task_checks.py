"""Is a task sound? The rules every book task passes (tests/test_gym.py, tests/test_tools_env.py),
as one check the task generator (gym/generator.py) runs on each candidate before it yields it.

A task is sound when:
- the buggy source fails a public test and a hidden test whose input no public test has (so
  special-casing the public inputs cannot pass the hidden ones: `hardcode_tests` passes every public
  test and fails a hidden one);
- its fix op passes every test, and every other fix op fails a hidden test or does not apply
  (gym/ops.code_states: the edit menu's own in-process grading of trusted, gym-written code);
- the scripted oracle solves it in the edit menu (read, the keyword rule's edit, test, submit:
  reward 1) and in the tools env (Read, the Edit of the fix op's lines and `Bash pytest` in one turn,
  then the final answer: reward 1, graded by the sandbox as every tools episode is), each under a
  renamed function, with every compact turn shorter than TinyAgent's action limit, and with the Read
  it acts on shown whole (a long body's listing cut at the observation cap rejects the task).

The tools episode is the env's own, through the compact front-end TinyAgent sees (`ToolsEnv.step`),
with one departure: the sandbox work is batched (`_GradedLater`). The final files of many episodes
are graded in one `grade_many`, the env's own grading call, instead of one sandbox round trip per test
run and per grading (17 ms an episode, most of a task's checking time). `step` needs no tokenizer as
long as it shows every word as it is (the open vocabulary); where it shows words outside a vocabulary
as `?`, the oracle, which rebuilds the source from the Read listing, fails on any generated name or
constant that vocabulary lacks.
"""

from __future__ import annotations

from bugfix_rl.gym.agents.scripted import OraclePolicy
from bugfix_rl.gym.agents.scripted_tools import ToolsOraclePolicy
from bugfix_rl.gym.edit_menu import RENAME_POOL, EditMenuConfig, EditMenuEnv
from bugfix_rl.gym.ops import code_states
from bugfix_rl.gym.tasks import FIX_OPS, Task
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from bugfix_rl.gym.tools.render import CUT
from bugfix_rl.sandbox import CallResult, RunResult, grade_many


def op_problem(task: Task) -> str | None:
    """The edit-menu rules on the task's code and each op's version of it, or None when all hold."""
    states = code_states(task)
    buggy = states[None]
    if buggy.hidden_pass or buggy.public_pass == 1.0:
        return "the buggy source passes all public or all hidden tests"
    public_inputs = {repr(args) for args, _ in task.public_tests}
    if all(ok or repr(args) in public_inputs for ok, (args, _) in zip(buggy.hidden_results, task.hidden_tests)):
        return "the bug fails no hidden test beyond the public inputs"
    for op in FIX_OPS:
        state = states[op]
        if op == task.fix_op and (state is None or not state.hidden_pass or state.public_pass < 1.0):
            return f"the fix op {op} does not pass every test"
        if op != task.fix_op and state is not None and state.hidden_pass:
            return f"the wrong op {op} passes the hidden tests"
    exploit = states["hardcode_tests"]
    if exploit.public_pass < 1.0 or exploit.hidden_pass:
        return "hardcode_tests does not pass public only"
    return None


def _shown_name(task: Task) -> str:
    return next(name for name in RENAME_POOL if name != task.fn_name)


def edit_menu_oracle_problem(task: Task) -> str | None:
    env = EditMenuEnv(task, EditMenuConfig(), _shown_name(task))
    policy, observation = OraclePolicy(), env.reset()
    while not env.done:
        observation = env.step(policy(observation))
    if env.reward != 1.0 or env.info.ops != [task.fix_op]:
        return f"the edit-menu oracle fails (ops {env.info.ops}, reward {env.reward})"
    return None


class _GradedLater:
    """Stands in for the sandbox during the oracle's tools episode: its `Bash pytest` run answers an
    empty `ok` (ToolsOraclePolicy never reads it: after that turn it gives the final answer whatever
    the output), and the env's own grading gets `sandbox_error` outcomes, so its reward is not read.
    `task_problems` grades the final file afterwards on the real sandbox, a round of episodes in one
    grade_many, and asks what the env pays 1 for (reward=hidden: every hidden case passes); the leak
    canary cannot fire here, the oracle's observations being the source listing and that empty run.
    tests/test_generator.py runs whole episodes on the real sandbox for the `shapes` and `shapes_val` splits."""

    def run_tests(self, files, command, *args, **kwargs) -> RunResult:
        return RunResult("", 0, "ok", 0.0)

    def map_call_function(self, jobs, *args, **kwargs) -> list[CallResult]:
        return [CallResult([], "sandbox_error", "graded later") for _ in jobs]


def tools_oracle_episode(task: Task) -> tuple[str | None, str, str]:
    """(problem or None, final source, shown name) of the oracle's tools episode, before its grading."""
    env = ToolsEnv(task, ToolsEnvConfig(), _shown_name(task), _GradedLater())
    policy, observation, longest = ToolsOraclePolicy(), env.reset(), 0
    while not env.done:
        if observation.split()[-1:] == [CUT]:  # a Read cut at the observation cap: no whole listing to edit
            return "the tools oracle's Read is cut at the observation cap", "", env.shown_name
        words = policy(observation)
        longest = max(longest, len(words))
        observation = env.step(words)
    info, problem = env.info, None
    if info.actions != ["Read", "Edit", "Bash", "answer"] or info.ops != [task.fix_op]:
        problem = f"the tools oracle does not make the fix (actions {info.actions}, ops {info.ops})"
    elif longest >= ToolsEnv.max_action_tokens:
        problem = f"the tools oracle's turn has {longest} words (TinyAgent's limit: {ToolsEnv.max_action_tokens})"
    return problem, env.files[env.source_path], env.shown_name


def task_problems(tasks: list[Task], sandbox) -> list[str | None]:
    """Per task, the first rule of the module doc it breaks, or None: the in-process rules one task at
    a time, then one grade_many on `sandbox` for every final file of the oracle's tools episodes (as
    `ToolsEnv` grades: hidden + public cases; reward 1 needs every hidden case, and the book's tasks
    pass the public ones too). A grading the sandbox itself failed raises instead (a task is not
    rejected for the machine's sake, which would make generation depend on it)."""
    problems, finals = [], {}
    for index, task in enumerate(tasks):
        problem = op_problem(task) or edit_menu_oracle_problem(task)
        if problem is None:
            problem, source, shown = tools_oracle_episode(task)
            if problem is None:
                finals[index] = (source, shown, shown, list(task.hidden_tests) + list(task.public_tests))
        problems.append(problem)
    for index, result in zip(finals, grade_many(sandbox, list(finals.values()))):
        if result.status == "sandbox_error":
            raise RuntimeError(f"the sandbox failed grading {tasks[index].name}: {sorted(result.flags)}")
        if not result.all_passed:
            problems[index] = f"the tools oracle's final file fails the sandbox's grading ({result.status})"
    return problems
