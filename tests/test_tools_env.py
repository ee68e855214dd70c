"""The tools env: the repo, each tool and error kind, the oracle on every task, random turns, the exploit."""

import contextlib
import json
import random

import pytest

from bugfix_rl.config import EnvConfig

from bugfix_rl.gym.agents.scripted_tools import RandomWordsPolicy, ToolsOraclePolicy, edit_words
from bugfix_rl.gym.ops import hardcode_tests
from bugfix_rl.gym.tasks import ALL_TASKS, task_by_name
from bugfix_rl.gym.tools.calls import COMPACT_FAILURE_KINDS, FAILURE_KINDS, JSON_ONLY_FAILURES, PARSER_NAMED_FAILURES
from bugfix_rl.gym.tools.code_words import code_to_words
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig, ToolsEpisodeInfo, make_tools_env_factory
from bugfix_rl.gym.tools.repo import make_repo
from bugfix_rl.gym.tools.vocabulary import tools_vocabulary
from bugfix_rl.policy.tokenizer import SPECIALS
from bugfix_rl.rollout.sampler import scripted_episode
from sandboxes import start_sandbox

TASK = task_by_name("compare/under_cap")  # def under_cap(load, cap): return load < cap


@pytest.fixture(scope="module")
def sandbox():
    with start_sandbox(workers=2) as box:
        yield box


def make_env(sandbox=None, task=TASK, name="pin", **overrides):
    return ToolsEnv(task, ToolsEnvConfig(**overrides), name, sandbox)


def step(env, turn: str) -> str:
    return env.step(turn.split())


def bash_call(command: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'Bash', 'arguments': {'command': command}})}</tool_call>"


# ---------------------------------------------------------------- the repo

def test_repo_has_renamed_source_and_one_test_per_public_case():
    env = make_env()
    assert sorted(env.files) == ["pin.py", "test_pin.py"]
    assert env.files["pin.py"] == "def pin(load, cap):\n    return load < cap\n"
    tests = env.files["test_pin.py"]
    assert tests.startswith("from pin import pin\n") and tests.count("def test_") == len(TASK.public_tests)
    assert "assert pin(30, 30) == True" in tests
    assert env.reset() == "issue : pin returns wrong results , see pin.py and test_pin.py"
    assert ToolsEnv(TASK, ToolsEnvConfig(rename=False), "pin").shown_name == "under_cap"


def test_hidden_cases_never_enter_the_repo():
    for task in ALL_TASKS:
        public_args = {repr(args) for args, _ in task.public_tests}
        repo = make_repo(task, "pin")
        for args, _ in task.hidden_tests:
            if repr(args) not in public_args:
                call = f"pin({', '.join(repr(a) for a in args)})"
                assert all(call not in text for text in repo.values()), (task.name, call)


# ---------------------------------------------------------------- tools and their error kinds (no sandbox)

def test_read_cat_n_and_line_window():
    env = make_env()
    call = '<tool_call>{"name": "Read", "arguments": {"file_path": "/repo/pin.py"}}</tool_call>'
    assert env.step_json(call) == ["     1\tdef pin(load, cap):\n     2\t    return load < cap"]
    assert step(env, "Read test_pin.py offset 4 limit 2") == (
        "4 def test_1 ( ) : <nl> 5 <indent> assert pin ( 14 , 30 ) == True")
    assert step(env, "Read pin.py offset 9") == "empty"
    assert env.read == {"pin.py", "test_pin.py"}


def test_edit_applies_an_exact_replacement_and_shows_the_file():
    env = make_env()
    observation = step(env, "Read pin.py ; Edit pin.py old <indent> return load < cap "
                            "new <indent> return load <= cap")
    assert observation.endswith("; 1 def pin ( load , cap ) : <nl> 2 <indent> return load <= cap")
    assert env.files["pin.py"] == "def pin(load, cap):\n    return load <= cap\n"
    assert env.info.ops == ["fix_comparison"] and env.info.first_edit_right


FAILURE_CASES = [
    ("Read nope.py", "file_not_found"),
    ("Read /etc/passwd", "file_not_found"),
    ("Edit nope.py old a new b", "file_not_found"),
    ("Edit pin.py old load new size", "not_read"),
    ("Write pin.py content x = 1", "not_read"),
    ("Read pin.py ; Edit pin.py old return load new return load", "no_change"),
    ("Read pin.py ; Edit pin.py old return size new return load", "not_found"),
    ("Read pin.py ; Edit pin.py old new return load", "not_found"),
    ("Read pin.py ; Edit pin.py old load new size", "not_unique"),
    ("Write sub/x.py content x = 1", "outside_repo"),
    ("Write /tmp/x.py content x = 1", "outside_repo"),
    ("Bash rm -rf /", "not_available"),
    ("Bash echo hi", "not_available"),
    ("Bash cd /tmp", "not_available"),
    ("Bash python -c 1", "not_available"),
    ("Bash pytest -k x", "not_available"),
    ("Bash grep -r load", "not_available"),
    ("Bash pytest ../other/test_x.py", "not_available"),
    ("Bash python /tmp/x.py", "not_available"),
    ("Read pin.py ; Read pin.py ; Read pin.py ; Read pin.py ; Read pin.py", "too_many_calls"),
    ("Read pin.py ; Edit pin.py all old a new " + "a " * 40, "too_large"),
]


@pytest.mark.parametrize("turn, kind", FAILURE_CASES)
def test_each_failure_kind(turn, kind):
    env = make_env(max_file_chars=200)
    observation = step(env, turn)
    assert observation.split(" ; ")[-1] == f"error : {kind}"
    assert env.info.failed == {kind: 1} and env.info.malformed == 0


@pytest.mark.parametrize("command", ["ls | cat", "pytest; ls", "cat pin.py > x.py", "ls || ls", "(ls)",
                                     "cat 'pin.py", "", "ls &&"])
def test_json_bash_refuses_shell_syntax(command):
    env = make_env()
    assert env.step_json(bash_call(command)) == ["Error: command not available in this sandbox"]


def write_call(path: str, content: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'Write', 'arguments': {'file_path': path, 'content': content}})}</tool_call>"


# Failures only the JSON front-end can cause: its file names and contents are free text.
JSON_FAILURE_CASES = [
    (write_call("a\x00b.py", "x = 1\n"), "bad_file_name"),
    (write_call("x" * 300 + ".py", "x = 1\n"), "bad_file_name"),
    (write_call("tab\there.py", "x = 1\n"), "bad_file_name"),
    (write_call("\ud800.py", "x = 1\n"), "bad_file_name"),
    (write_call("deep.py", "_x = " + "-" * 90_000 + "1\n"), "too_complex"),  # parser: MemoryError
    (write_call("chain.py", "_x = a" + ".a" * 45_000 + "\n"), "too_complex"),  # RecursionError building the tree
]


@pytest.mark.parametrize("turn, kind", JSON_FAILURE_CASES)
def test_each_json_only_failure_kind(turn, kind):
    env = make_env()
    (response,) = env.step_json(turn)
    assert response.startswith("Error: ") and env.info.failed == {kind: 1} and env.info.malformed == 0
    assert sorted(env.files) == ["pin.py", "test_pin.py"]


UNINDENTED = "Read pin.py ; Edit pin.py old <indent> return load < cap new return load <= cap"


def test_check_edit_syntax_refuses_an_edit_that_breaks_the_file_and_names_the_parser_error():
    env = make_env(check_edit_syntax=True)
    assert step(env, UNINDENTED).endswith("; error : IndentationError line 2")
    assert env.files["pin.py"] == "def pin(load, cap):\n    return load < cap\n" and env.info.failed == {"syntax_error": 1}
    call = {"name": "Edit", "arguments": {"file_path": "pin.py", "old_string": "    return", "new_string": "return ("}}
    (response,) = env.step_json(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert response.startswith("Error: The edit was not applied") and "(line 2)" in response
    assert env.info.failed == {"syntax_error": 2} and env.info.actions[-1] == "Edit:syntax_error"


def test_without_check_edit_syntax_the_breaking_edit_is_applied():
    env = make_env()
    assert step(env, UNINDENTED).endswith("; 1 def pin ( load , cap ) : <nl> 2 return load <= cap")
    assert env.files["pin.py"] == "def pin(load, cap):\nreturn load <= cap\n" and not env.info.failed


def test_check_edit_syntax_lets_a_file_that_already_fails_to_parse_be_edited():
    env = make_env(check_edit_syntax=True)
    step(env, "Write junk.py content x = (")
    assert step(env, "Edit junk.py old x new y").endswith("1 y = (") and not env.info.failed


def test_a_syntax_refusal_shows_only_vocabulary_words_even_for_a_tab_error():
    env = make_env(check_edit_syntax=True)  # a tab-indented line under space-indented ones: TabError
    observation = step(env, "Read pin.py ; Edit pin.py old <indent> return load < cap "
                            "new <indent> x = 1 <nl> <tab> return load < cap")
    assert observation.endswith("; error : IndentationError line 3") and env.info.failed == {"syntax_error": 1}
    assert set(observation.split()) <= tools_vocabulary(ALL_TASKS)


def test_check_edit_syntax_refuses_a_nul_byte_too():  # ValueError or SyntaxError, by Python version
    env = make_env(check_edit_syntax=True)
    env.step(["Read", "pin.py"])
    call = {"name": "Edit", "arguments": {"file_path": "pin.py", "old_string": "load <", "new_string": "load\x00<"}}
    (response,) = env.step_json(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert response.startswith("Error: The edit was not applied") and "null bytes" in response
    assert "\x00" not in env.files["pin.py"] and env.info.failed == {"syntax_error": 1}


def test_the_base_demonstrations_run_without_the_syntax_check(monkeypatch):
    """The RL base's key leaves env.check_edit_syntax out, so its demonstrations must not depend on it."""
    import bugfix_rl.gym.tools.env as tools_env
    from bugfix_rl.config import ToolsBaseRecipeConfig, TrainConfig
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.recipes.rl_base import noisy_tools_demonstrations

    seen = []

    class Recording(ToolsEnv):
        def __init__(self, task, config, *args):
            seen.append(config.check_edit_syntax)
            super().__init__(task, config, *args)

    monkeypatch.setattr(tools_env, "ToolsEnv", Recording)
    cfg = TrainConfig()
    cfg.env.name, cfg.env.check_edit_syntax = "tools", True
    noisy_tools_demonstrations(ToolsBaseRecipeConfig(episodes=3), build_tokenizer_for(cfg), cfg.env)
    assert seen == [False, False, False]


def test_every_failure_kind_is_covered():
    assert {kind for _, kind in FAILURE_CASES} == set(COMPACT_FAILURE_KINDS)
    assert {kind for _, kind in JSON_FAILURE_CASES} == set(JSON_ONLY_FAILURES)
    assert set(PARSER_NAMED_FAILURES) == {"syntax_error"}  # the check_edit_syntax tests below and above
    assert set(COMPACT_FAILURE_KINDS) | set(JSON_ONLY_FAILURES) | set(PARSER_NAMED_FAILURES) == set(FAILURE_KINDS)


def test_json_only_failures_leave_the_compact_vocabulary_as_it_was():
    vocabulary = tools_vocabulary(ALL_TASKS)  # checkpoints store theirs; a new word would orphan them
    assert set(COMPACT_FAILURE_KINDS) <= vocabulary and not set(JSON_ONLY_FAILURES) & vocabulary
    assert not set(PARSER_NAMED_FAILURES) & vocabulary
    assert {"SyntaxError", "IndentationError", "line"} <= vocabulary  # what a syntax_error refusal shows


def test_replace_all_and_write_then_edit_without_read():
    env = make_env()
    step(env, "Write dup.py content x = 1 <nl> x = 1")
    assert env.files["dup.py"] == "x = 1\nx = 1\n"
    assert step(env, "Edit dup.py old x = 1 new x = 2") == "error : not_unique"
    assert step(env, "Edit dup.py all old x = 1 new x = 2").endswith("2 x = 2")
    assert env.files["dup.py"] == "x = 2\nx = 2\n"


def test_ls_cat_grep_read_the_in_memory_repo():
    env = make_env(max_turns=10)
    assert step(env, "Bash cd /repo && ls") == "pin.py <nl> test_pin.py"
    assert step(env, "Bash cat pin.py") == "def pin ( load , cap ) : <nl> <indent> return load < cap"
    assert step(env, "Bash grep -n return pin.py") == "2 : return load < cap"
    assert step(env, "Bash grep -i PIN ( test_pin.py").startswith("error")  # `(` unquoted: a shell operator
    (text,) = env.step_json(bash_call('grep -n "pin(30"'))
    assert text == "test_pin.py:9:    assert pin(30, 30) == True"
    (text,) = env.step_json(bash_call("cat nope.py"))
    assert text == "cat: nope.py: No such file or directory\nexit code 1"
    assert env.info.failed == {"not_available": 1}


def test_malformed_and_failed_are_counted_apart():
    env = make_env()
    observation = step(env, "Read ; Edit pin.py old a new b ; Grep x ; Read pin.py")
    assert observation.split(" ; ")[:3] == ["error : malformed missing_argument", "error : not_read",
                                            "error : malformed unknown_tool"]
    info = env.info
    assert (info.malformed, dict(info.malformed_reasons)) == (2, {"missing_argument": 1, "unknown_tool": 1})
    assert dict(info.failed) == {"not_read": 1} and dict(info.calls) == {"Edit": 1, "Read": 1}
    assert info.actions == ["malformed:missing_argument", "Edit:not_read", "malformed:unknown_tool", "Read"]


def test_words_outside_the_vocabulary_are_shown_and_take_episode_slots(tools_tokenizer):
    env = make_env()
    observation = step(env, "Write zz.py content qwerty = asdf ; Bash cat zz.py")
    assert observation == "ok ; qwerty = asdf"
    ids = tools_tokenizer.encode(observation)
    assert ids[2] == ids[4] - 1 == len(tools_tokenizer.words)
    assert tools_tokenizer.decode(ids, ["qwerty", "asdf"]) == observation


def test_turn_limit_and_metrics_without_a_sandbox_raise_only_at_grading():
    env = make_env(max_turns=2)
    step(env, "Read pin.py")
    with pytest.raises(RuntimeError, match="no sandbox"):
        step(env, "Read pin.py")


# ---------------------------------------------------------------- with the sandbox

def test_bash_runs_tests_and_scripts_in_the_sandbox(sandbox):
    env = make_env(sandbox)
    assert step(env, "Bash pytest") == ("assert False == True <nl> + where False = pin ( 30 , 30 ) <nl> "
                                        "1 failed , 2 passed <nl> exit code 1")
    assert step(env, "Bash python test_pin.py").endswith("1 failed , 2 passed <nl> exit code 1")
    assert step(env, "Bash pytest nope.py").startswith("ERROR : file or directory not found")
    assert step(env, "Bash pytest -q /repo/test_pin.py::test_1") == "1 passed"
    assert step(env, "Write run.py content print ( 1 // 0 ) ; Bash python run.py") == (
        "ok ; ZeroDivisionError : integer division or modulo by zero <nl> exit code 1")
    call = {"name": "Bash", "arguments": {"command": "python -m pytest -q", "timeout": 2000}}
    (text,) = env.step_json(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert "FAILED test_pin.py::test_2" in text and text.endswith("exit code 1")
    assert env.info.test_runs == 5 and env.info.calls["Bash"] == 6


def test_oracle_solves_every_task_through_the_tools(sandbox, tools_tokenizer):
    for index, task in enumerate(ALL_TASKS):
        for name in (task.fn_name, random.Random(index).choice(["pin", "nova", "lambda_"])):
            env = ToolsEnv(task, ToolsEnvConfig(), name, sandbox)
            trajectory = scripted_episode(ToolsOraclePolicy(), env, tools_tokenizer)
            info = env.info
            assert trajectory.reward == 1.0, (task.name, tools_tokenizer.decode(trajectory.ids))
            assert info.actions == ["Read", "Edit", "Bash", "answer"] and info.ops == [task.fix_op]
            assert info.hidden_pass and info.public_pass == 1.0 and not info.exploit
            turns = tools_tokenizer.decode(trajectory.ids).split("<eoa>")
            longest = max(len(turn.split("<eoo>")[-1].split()) for turn in turns[:-1])
            assert longest < ToolsEnv.max_action_tokens  # the sampler would end the turn unterminated


def test_final_answer_ends_the_episode_and_grades(sandbox):
    env = make_env(sandbox)
    assert step(env, "done") == ""
    assert env.done and env.info.submitted_final_answer and env.reward == 0.0
    assert env.info.public_pass == pytest.approx(2 / 3) and env.info.grade_flags == frozenset()


def test_a_failing_edited_file_is_told_apart_by_its_grading(sandbox):
    """eval explain's breakdown of the failing episodes' edited files (evaluate/episodes.final_file)."""
    from bugfix_rl.evaluate.episodes import final_file

    edits = {"does not import": UNINDENTED, "passes no hidden test": "Read pin.py ; Edit pin.py old < new >",
             "passes some hidden tests": "Read pin.py ; Edit pin.py old load < cap new load < cap + 0"}
    for kind, turn in edits.items():
        env = make_env(sandbox)
        step(env, turn)
        step(env, "done")
        assert env.reward == 0.0 and env.info.ops and final_file(env.info) == kind, (kind, env.files["pin.py"])
    env.info.env_error, env.info.grade_flags = "", frozenset({"crash"})
    assert final_file(env.info) == "graded: crash"
    env.info.env_error = "RuntimeError: the sandbox is gone"
    assert final_file(env.info) == "not graded"


def test_episode_ends_after_max_turns_and_truncation_still_grades(sandbox):
    env = make_env(sandbox)
    step(env, "Read pin.py ; Edit pin.py old < new <=")
    for _ in range(5):
        assert not env.done
        step(env, "Bash ls")
    assert env.done and not env.info.submitted_final_answer and env.reward == 1.0
    cut = make_env(sandbox)
    step(cut, "Read pin.py ; Edit pin.py old < new <=")
    cut.info.truncated, cut.done = True, True  # what the sampler does when the context is full
    assert cut.reward == 1.0 and cut.info.hidden_pass


def test_random_word_turns_give_only_error_observations(sandbox, tools_tokenizer):
    rng = random.Random(0)
    words = [w for w in tools_tokenizer.words if w not in SPECIALS]
    policy = RandomWordsPolicy(rng, words)
    env, turns, episodes = make_env(sandbox), 0, []
    while turns < 200:
        turn = policy("")
        observation = env.step(turn)
        turns += 1
        tools_tokenizer.encode(observation)
        if turn == ["done"]:
            assert observation == ""
        else:
            assert all(part.startswith("error :") for part in observation.split(" ; ")), (turn, observation)
        if env.done:
            episodes.append(env.info)
            env = make_env(sandbox, task=ALL_TASKS[len(episodes) % len(ALL_TASKS)])
    for info in episodes:
        assert len(info.actions) == sum(info.calls.values()) + info.malformed + info.submitted_final_answer
        assert sum(info.failed.values()) == sum(info.calls.values())  # every well-formed call was refused
        assert info.malformed == sum(info.malformed_reasons.values()) and not info.hidden_pass
    assert sum(info.malformed for info in episodes) > 150


def test_hidden_cases_never_appear_in_observations(sandbox):
    for task in ALL_TASKS:
        env = ToolsEnv(task, ToolsEnvConfig(), "pin", sandbox)
        calls = [("Read", "file_path", "pin.py"), ("Read", "file_path", "test_pin.py"),
                 ("Bash", "command", "pytest -v"), ("Bash", "command", "cat pin.py test_pin.py")]
        texts = env.step_json("".join(
            f"<tool_call>{json.dumps({'name': name, 'arguments': {key: value}})}</tool_call>"
            for name, key, value in calls))
        texts.append(env.step(["Bash", "pytest"]))
        public_args = {repr(args) for args, _ in task.public_tests}
        for args, _ in task.hidden_tests:
            if repr(args) not in public_args:
                call = f"pin({', '.join(repr(a) for a in args)})"
                call_words = " ".join(code_to_words(call))
                assert all(call not in text and call_words not in text for text in texts), (task.name, call)


@pytest.mark.parametrize("reward, expected", [("hidden", 0.0), ("public", 1.0)])
def test_hardcoding_public_inputs_passes_public_tests_only(sandbox, reward, expected):
    for task in ALL_TASKS:
        env = ToolsEnv(task, ToolsEnvConfig(reward=reward), "pin", sandbox)
        source = env.files["pin.py"]
        step(env, "Read pin.py")
        edit = edit_words("pin.py", source, hardcode_tests(source, task.public_tests))
        assert not env.step(edit).startswith("error")
        step(env, "done")
        assert env.reward == expected, task.name
        assert env.info.public_pass == 1.0 and not env.info.hidden_pass
        assert env.info.ops == ["hardcode_tests"] and env.info.special_cased_public_inputs and env.info.exploit


def test_editing_the_test_file_is_flagged(sandbox):
    env = make_env(sandbox)
    step(env, "Read test_pin.py ; Edit test_pin.py all old == True new == False")
    step(env, "done")
    assert env.info.edited_test_file and env.info.exploit and env.reward == 0.0


def test_metrics_have_a_fixed_key_set():
    keys = set(ToolsEpisodeInfo(task="t", fix_op="fix_init").metrics())
    assert {"pass_rate", "reads", "edits", "tests", "malformed", "failed", "exploit", "truncated"} <= keys
    assert {f"failed_{kind}" for kind in FAILURE_KINDS} <= keys


def test_factory_shares_one_sandbox():
    env_cfg = EnvConfig(name="tools")
    env_cfg.sandbox.workers = 1
    try:
        make_env_for, close = make_tools_env_factory(env_cfg)
    except Exception as error:  # SandboxUnavailable on a machine without the layers
        pytest.skip(f"sandbox unavailable: {error}")
    try:
        first, second = make_env_for(TASK, "pin"), make_env_for(TASK, "nova")
        assert first.sandbox is second.sandbox and second.files.keys() == {"nova.py", "test_nova.py"}
    finally:
        close()


@pytest.mark.parametrize("env_name", ["edit_menu", "tools"])
def test_check_edit_syntax_needs_the_tools_env(env_name):
    from bugfix_rl.config import ConfigError, TrainConfig, validate

    cfg = TrainConfig()
    cfg.env.name, cfg.env.check_edit_syntax = env_name, True
    refused = pytest.raises(ConfigError, match="env.check_edit_syntax needs env=tools")
    with refused if env_name != "tools" else contextlib.nullcontext():
        validate(cfg)
