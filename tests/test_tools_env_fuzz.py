"""Property-based fuzzing of the tools env: adversarial turns through `step` and `step_json`.

Hypothesis builds episodes of random and adversarial turns (random bytes and unicode, huge strings,
deep nesting, pathological grep patterns, odd paths, wrong argument types, huge integers, unclosed
and malformed tool calls, every tool, sandbox payloads) and runs them through a real ToolsEnv and a
real sandbox. Properties: no exception ever leaves the env, every turn answers (a per-test timeout,
not a timing assertion, catches a hang), the model can never cause an infrastructure failure (a
`sandbox_error` status of any sandbox result, an `env_error`), and rewards are 0 or 1.

    pytest tests/test_tools_env_fuzz.py                      # a few hundred turns (default suite)
    pytest -m slow tests/test_tools_env_fuzz.py -p no:cacheprovider   # >= 10,000 turns (minutes)
"""

import json
import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bugfix_rl.gym.tasks import ALL_TASKS, task_by_name
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from bugfix_rl.gym.tools.vocabulary import known_words
from bugfix_rl.sandbox import Sandbox, SandboxConfig

TASKS = [task_by_name("compare/under_cap"), ALL_TASKS[0], ALL_TASKS[-1]]
BUGGY = "def pin(load, cap):\n    return load < cap\n"

# ---------------------------------------------------------------- strategies


def repeated(pieces: list[str], most: int = 120_000):
    """A piece repeated up to `most` times: huge strings and deep nesting, cheap to generate."""
    return st.builds(lambda piece, times: piece * times, st.sampled_from(pieces), st.integers(0, most))


HUGE = repeated(["=", "-", "(", "[", "{", "a", ".a", "\\", "\n", " ", "1", "é", "\x00", "\ud800", "<tool_call>",
                 "</tool_call>", "=== x ", "\\(a*\\)*", "-" * 3 + "\n", "d/"])
RANDOM_TEXT = st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("utf-8", "surrogateescape")))
PATHS = st.one_of(
    st.sampled_from(["pin.py", "/repo/pin.py", "./pin.py", "test_pin.py", "/repo/test_pin.py", "notes.txt", "x.py",
                     "test_x.py", "conftest.py", "", ".", "..", "/", "/repo", "/repo/", "/etc/passwd", "../x.py",
                     "sub/x.py", "a\x00b.py", "x" * 300 + ".py", "é" * 130 + ".py", "\ud800.py", "tab\t.py", "-rf",
                     " pin.py", "pin.py\n", "*", "pin.py::test_1", "__pycache__", "pin"]),
    st.text(max_size=40), repeated(["a", "/", "..", "\x00"], 400))
PAYLOADS = [  # model code with a purpose, run by Bash or by grading when it is the source file
    BUGGY, BUGGY.replace("<", "<="), '"""Doc."""\n' + BUGGY, "import math\n" + BUGGY,
    "_x = " + "-" * 90_000 + "1\n", "_x = a" + ".a" * 45_000 + "\n", "(" * 300 + ")" * 300 + "\n",
    "import os\nos.write(1, b'" + "=" * 20_000 + "x\\n')\n",
    "import os\nfor _ in range(1100):\n    os.mkdir('d')\n    os.chdir('d')\n",
    "import os\nos._exit(70)\n", "import sys\nsys.exit('sandbox_error')\n", "print('[sandbox_error]')\n",
    "import ctypes\nprint(ctypes.CDLL(None).shmget(0x5EED, 4096, 0o1666))\n",
    "import json, os, sys\nf = sys._getframe()\nwhile f and not isinstance(f.f_locals.get('job'), dict):\n"
    "    f = f.f_back\nif f:\n    os.write(3, json.dumps({'nonce': f.f_locals['job']['nonce'], "
    "'sandbox_error': 'x'}).encode())\n    os._exit(0)\n",
    "while True:\n    pass\n", "x = 'a' * (1 << 34)\n", "print('x' * 10_000_000)\n",
]
CODE = st.one_of(st.sampled_from(PAYLOADS), RANDOM_TEXT, HUGE)
PATTERNS = st.one_of(
    st.sampled_from(["\\(a*\\)*b", "(a*)*b", "\\(x+x+\\)+y", "[", "\\", "a\\{99999\\}", "\\(a\\)\\1", "^$", ".*",
                     "(?i)x", "\ud800", "\x00", "return", "load < cap", "-n", "-i"]),
    st.text(max_size=30), repeated(["a*", "\\(", "(", "\\)*"], 2_000))
COMMANDS = st.one_of(
    st.sampled_from(["pytest", "pytest -q", "pytest -x -v test_pin.py", "python -m pytest test_pin.py::test_1",
                     "python pin.py", "python test_pin.py", "python x.py 1 2", "ls", "ls -la /repo", "cat pin.py",
                     "cat pin.py pin.py nope.py", "cd /repo && pytest -x", "grep -n return pin.py", "grep -i PIN",
                     "rm -rf /", "pytest ../x.py", "ls | cat", "echo hi", "cd /repo && ls && ls && ls && ls",
                     "python -c 'print(1)'", "pytest --tb=short -rA", "cat " + "pin.py " * 2_000]),
    st.builds(lambda flags, pattern, targets: shlex.join(["grep", *flags, pattern, *targets]),
              st.lists(st.sampled_from(["-n", "-i", "-ni", "-x"]), max_size=2), PATTERNS,
              st.lists(st.sampled_from(["pin.py", "test_pin.py", "notes.txt", "nope.py", "/repo/pin.py"]), max_size=3)),
    st.lists(st.text(max_size=20), max_size=6).map(shlex.join), RANDOM_TEXT, HUGE)
INTEGERS = st.one_of(st.integers(-5, 10**6), st.integers(10**30, 10**40), st.sampled_from([0, 1, 2**63]))
JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), INTEGERS, st.floats(), st.text(max_size=20)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                           max_leaves=8)
OLD_STRINGS = st.one_of(st.sampled_from(["load < cap", "<", "return", "", "a", "\n", "    ", "pin"]), RANDOM_TEXT, HUGE)


def _with_optional(required: dict, optional: dict):
    return st.fixed_dictionaries(required, optional=optional)


CALLS = st.one_of(
    st.tuples(st.just("Read"), _with_optional({"file_path": PATHS}, {"offset": INTEGERS, "limit": INTEGERS})),
    st.tuples(st.just("Edit"), _with_optional({"file_path": PATHS, "old_string": OLD_STRINGS, "new_string": CODE},
                                              {"replace_all": st.booleans()})),
    st.tuples(st.just("Write"), st.fixed_dictionaries({"file_path": PATHS, "content": CODE})),
    st.tuples(st.just("Bash"), _with_optional({"command": COMMANDS}, {"timeout": st.floats()})),
    st.tuples(st.sampled_from(["Read", "Edit", "Write", "Bash", "Grep", "", "read"]),
              st.dictionaries(st.sampled_from(["file_path", "content", "command", "offset", "x"]), JSON_VALUES,
                              max_size=4)),
)


def _block(call) -> str:
    name, arguments = call
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


BLOCKS = st.one_of(
    CALLS.map(_block), CALLS.map(_block), CALLS.map(_block),
    st.sampled_from(["<tool_call>{", "<tool_call>not json</tool_call>", "<tool_call>[]</tool_call>",
                     '<tool_call>{"name": "Read", "arguments": {"file_path": "pin.py", "offset": ' + "1" * 5_000 + "}}</tool_call>",
                     "<tool_call>" + "[" * 100_000 + "</tool_call>", '<tool_call>{"name": NaN}</tool_call>',
                     "</tool_call>", "<tool_call><tool_call></tool_call>"]),
    repeated(["<tool_call>", "<tool_call>{}</tool_call>"], 20_000), RANDOM_TEXT)
CALL_TURNS = st.lists(BLOCKS, min_size=1, max_size=6).map("".join)
JSON_TURNS = st.one_of(CALL_TURNS, CALL_TURNS, CALL_TURNS, st.none(), RANDOM_TEXT, HUGE)  # text alone: final answer
WORDS = st.one_of(st.sampled_from(sorted(known_words())), st.sampled_from(["Read", "Edit", "Write", "Bash", ";",
                                                                           "done", "old", "new", "all", "content",
                                                                           "pin.py", "<nl>", "<indent>", "offset",
                                                                           "²", "1" * 5_000]),
                  st.text(max_size=12))
COMPACT_TURNS = st.one_of(st.lists(WORDS, min_size=1, max_size=60), st.none(), st.lists(HUGE, max_size=3))
TURNS = st.lists(st.one_of(st.tuples(st.just("json"), JSON_TURNS), st.tuples(st.just("compact"), COMPACT_TURNS)),
                 min_size=3, max_size=8)


# ---------------------------------------------------------------- the property

@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(workers=2, timeout_s=1.0, cpu_s=1)) as box:
        yield box


class Observed:
    """The real sandbox, passed through, with the status of every result it returns recorded (a model
    may well print or write the text `[sandbox_error]`; only the status says what happened)."""

    def __init__(self, sandbox):
        self.sandbox, self.statuses = sandbox, []

    def run_tests(self, files, command, timeout_s=None):
        result = self.sandbox.run_tests(files, command, timeout_s=timeout_s)
        self.statuses.append(result.status)
        return result

    def map_call_function(self, jobs):
        results = self.sandbox.map_call_function(jobs)
        self.statuses += [result.status for result in results]
        return results


def run_episode(sandbox, task, name: str, turns, counter: list[int], check_edit_syntax: bool = False) -> None:
    """Every turn through the env; then the properties. Raises on any violation."""
    observed = Observed(sandbox)
    env = ToolsEnv(task, ToolsEnvConfig(check_edit_syntax=check_edit_syntax), name, observed)
    for front_end, turn in turns:
        if env.done:
            break
        if front_end == "json":
            answer = env.step_json(turn)
            assert isinstance(answer, list) and all(isinstance(text, str) for text in answer)
        else:
            assert isinstance(env.step(turn), str)
        counter[0] += 1
    reward = env.reward  # grades if the turns did not end the episode
    info = env.info
    assert reward in (0.0, 1.0) and getattr(info, "env_error", "") == ""
    assert "sandbox_error" not in info.grade_flags and "sandbox_error" not in observed.statuses
    assert observed.statuses  # the episode was graded
    assert info.turns <= env.config.max_turns
    assert all(info.metrics()[f"failed_{kind}"] == count for kind, count in info.failed.items())


def fuzz(sandbox, examples: int, derandomize: bool) -> int:
    """Run `examples` random episodes, every other one with env.check_edit_syntax (not drawn, so the draws
    stay as they were); the number of turns they took."""
    counter, episodes = [0], [0]

    @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize,
              suppress_health_check=list(HealthCheck))
    @given(task=st.sampled_from(TASKS), name=st.sampled_from(["pin", "nova", "under_cap"]), turns=TURNS)
    def episode(task, name, turns):
        episodes[0] += 1
        run_episode(sandbox, task, name, turns, counter, check_edit_syntax=episodes[0] % 2 == 0)

    episode()
    return counter[0]


@pytest.mark.timeout(600, method="thread")
def test_adversarial_turns_never_raise_hang_or_fake_an_infrastructure_failure(sandbox):
    turns = fuzz(sandbox, examples=240, derandomize=True)
    # a floor on how much was exercised. Even derandomized, hypothesis draws constants from the source of the
    # local modules already imported (providers._get_local_constants), so the draw moves with what the
    # worker's earlier tests imported: 200 examples gave 516 turns alone and 495 once in a full suite; 240
    # give 697 alone (EPYC, hypothesis 6.170.27)
    assert turns >= 500, turns


@pytest.mark.slow
@pytest.mark.timeout(3000, method="thread")
def test_ten_thousand_adversarial_turns(sandbox):
    turns = fuzz(sandbox, examples=4_500, derandomize=False)
    print(f"{turns} adversarial turns")
    assert turns >= 10_000
