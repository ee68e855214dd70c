"""Attacks on the tools env by what a model writes (issue 12): one test per way through on 9e4fcfe.

Each test drives the real env (JSON turns through `step_json`) or the real sandbox with a payload a
model could write, and asserts the outcome that closes the hole; on 9e4fcfe each of them fails
(wrong reward, a hang, a crash, a dead server, a forged `sandbox_error`). Hangs are caught without
hanging the suite: the timed steps run in a child interpreter with a deadline. The last test checks
that nothing the attacks created outlived them (IPC objects, processes, files).
"""

import ctypes
import json
import os
import random
import secrets
import string
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import bugfix_rl
from bugfix_rl.gym.tasks import task_by_name
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from bugfix_rl.gym.tools.vocabulary import tools_vocabulary
from bugfix_rl.policy.tokenizer import build_tokenizer
from bugfix_rl.sandbox import LAYERS, Sandbox, SandboxConfig, grade, probes
from bugfix_rl.sandbox import workers as workers_module

pytestmark = [pytest.mark.timeout(300, method="thread"),
              pytest.mark.skipif(os.geteuid() != 0, reason="the attacks are checked against all layers (root)")]

TASK = task_by_name("compare/under_cap")  # shown as pin(load, cap): `load < cap`, fixed by `<=`
BUGGY = "def pin(load, cap):\n    return load < cap\n"
KEYS = {name: 0x5EED0000 + secrets.randbits(16) for name in ("shm", "msg", "fallback")}  # SysV keys of this run
SRC = str(Path(bugfix_rl.__file__).resolve().parents[1])  # the code under test, for child interpreters


def tool_call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def episode(sandbox, *turns: str) -> ToolsEnv:
    """Read pin.py, then `turns`, then the final answer (the episode is graded)."""
    env = ToolsEnv(TASK, ToolsEnvConfig(max_turns=10), "pin", sandbox)
    env.step_json(tool_call("Read", file_path="/repo/pin.py"))
    for turn in turns:
        env.step_json(turn)
    env.step_json("Done.")
    assert env.done
    return env


# ---------------------------------------------------------------- host state, for the last test

def host_ipc_objects() -> list[tuple[str, int, int, int]]:
    """(kind, key, id, owner uid) of every SysV IPC object in this (the host's) IPC namespace."""
    found = []
    for kind in ("shm", "msg", "sem"):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        header = lines[0].split()
        for line in lines[1:]:
            fields = line.split()
            found.append((kind, int(fields[0]), int(fields[1]), int(fields[header.index("uid")])))
    return found


def remove_ipc_object(kind: str, ident: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if kind == "sem":
        libc.semctl(ident, 0, 0)  # IPC_RMID
    else:
        (libc.shmctl if kind == "shm" else libc.msgctl)(ident, 0, None)


def processes_of(uids: set[int]) -> list[int]:
    """Live (not zombie) processes owned by any of `uids`."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{entry}/status").read_text().splitlines()
                          if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) in uids and not fields["State"].strip().startswith("Z"):
            found.append(int(entry))
    return found


def scratch_entries(box: Sandbox) -> list[str]:
    """What is left in the servers' private /tmp (the run dirs' tmpfs), read through /proc."""
    return [name for worker in box._workers for name in os.listdir(f"/proc/{worker.process.pid}/root/tmp")]


def ours(objects, uids: set[int], before: set = frozenset()) -> list:
    """Objects with this run's keys or owned by `uids`, except those already there `before`."""
    return [o for o in objects if (o[1] in KEYS.values() or o[3] in uids) and o[:3] not in before]


@pytest.fixture(scope="module", autouse=True)
def ipc_before():
    """The host's IPC objects before this module's attacks; after it, those with this run's keys
    (what an unfixed sandbox leaves) are removed again, whichever tests ran."""
    before = {(kind, key, ident) for kind, key, ident, _ in host_ipc_objects()}
    yield before
    for kind, key, ident, _ in host_ipc_objects():
        if key in KEYS.values():
            remove_ipc_object(kind, ident)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(workers=2, min_isolation=tuple(LAYERS))) as box:
        yield box


# ---------------------------------------------------------------- 1. answers shared between rollouts

SYSV_HELPERS = """
import ctypes, json
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmat.restype = ctypes.c_void_p
_libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]


def _segment(create):
    ident = _libc.shmget({shm_key}, 1 << 16, 0o1666 if create else 0)  # IPC_CREAT | rw for everyone
    if ident < 0:
        return None
    address = _libc.shmat(ident, None, 0)
    return None if address in (None, 2 ** 64 - 1) else address


def _answers():
    address = _segment(False)
    return json.loads(ctypes.string_at(address).decode() or "{{}}") if address else {{}}


def _remember(args, value):
    address = _segment(True)
    if address:
        table = _answers()
        table[repr(args)] = value
        data = json.dumps(table).encode() + b"\\0"
        ctypes.memmove(address, data, len(data))


class _Message(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_long), ("text", ctypes.c_char * 64)]


def _send(text):
    queue = _libc.msgget({msg_key}, 0o1666)
    if queue >= 0:
        _libc.msgsnd(queue, ctypes.byref(_Message(1, text.encode())), 64, 0o4000)  # IPC_NOWAIT
""".format(shm_key=KEYS["shm"], msg_key=KEYS["msg"])

WRITER = SYSV_HELPERS + """

def pin(load, cap):
    value = load <= cap
    _remember((load, cap), value)
    _send(repr((load, cap)))
    return value
"""
READER = SYSV_HELPERS + """

def pin(load, cap):
    known = _answers()
    if repr((load, cap)) in known:
        return known[repr((load, cap))]
    return load < cap
"""
QUEUE_READER = SYSV_HELPERS + """
leaked = []
queue = _libc.msgget({msg_key}, 0)
message = _Message()
while queue >= 0 and _libc.msgrcv(queue, ctypes.byref(message), 64, 0, 0o4000) >= 0:
    leaked.append(message.text.decode())
print("leaked", leaked)
""".format(msg_key=KEYS["msg"])


def test_an_unfixed_bug_is_not_paid_with_answers_shared_through_ipc(sandbox):
    writer = episode(sandbox, tool_call("Write", file_path="pin.py", content=WRITER))
    reader = episode(sandbox, tool_call("Write", file_path="pin.py", content=READER))
    assert writer.reward == 1.0  # a real fix, whatever its IPC calls did
    assert reader.reward == 0.0, "the reader kept the bug and was paid from the writer's answers"
    assert ours(host_ipc_objects(), set()) == [], "a segment or queue outlived its job"


def test_hidden_inputs_do_not_reach_a_later_episode_through_a_message_queue(sandbox):
    episode(sandbox, tool_call("Write", file_path="pin.py", content=WRITER))  # graded on the hidden inputs
    later = ToolsEnv(TASK, ToolsEnvConfig(), "pin", sandbox)
    (wrote, ran) = later.step_json(tool_call("Write", file_path="leak.py", content=QUEUE_READER)
                                   + tool_call("Bash", command="python leak.py"))
    assert "leaked []" in ran, ran
    assert not any(repr(args) in ran for args, _ in TASK.hidden_tests)


def test_a_job_without_seccomp_still_leaves_nothing_in_ipc_for_the_next(monkeypatch):
    """seccomp off (as on other architectures): each job gets its own IPC namespace instead."""
    switch_off = ("def _unavailable(iso):\n    raise OSError('switched off by the test')\n"
                  "server.hardening.seccomp.build_seccomp = _unavailable\n")
    boot = workers_module._BOOT.replace("server.main(", switch_off + "server.main(")
    assert boot != workers_module._BOOT
    monkeypatch.setattr(workers_module, "_BOOT", boot)
    create = SYSV_HELPERS.replace(str(KEYS["shm"]), str(KEYS["fallback"])) + "print(_segment(True) is not None)\n"
    find = SYSV_HELPERS.replace(str(KEYS["shm"]), str(KEYS["fallback"])) + "print(_segment(False) is not None)\n"
    with Sandbox(SandboxConfig(workers=1)) as box:
        assert not box.layers["seccomp"]
        assert box.run_tests({"create.py": create}, "python create.py").stdout.strip() == "True"
        assert box.run_tests({"find.py": find}, "python find.py").stdout.strip() == "False"
        assert box.layers["ipcns"] and not box.layers["seccomp_ipc"]
    assert ours(host_ipc_objects(), set()) == []


# ---------------------------------------------------------------- 2. hangs by regex backtracking

TIMED_STEP = """
import json, sys, time
from bugfix_rl.gym.tasks import task_by_name
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from bugfix_rl.sandbox import Sandbox, SandboxConfig

turns = json.loads(sys.stdin.read())
with Sandbox(SandboxConfig(workers=1)) as sandbox:
    env = ToolsEnv(task_by_name("compare/under_cap"), ToolsEnvConfig(), "pin", sandbox)
    for turn in turns[:-1]:
        env.step_json(turn)
    started, started_cpu = time.perf_counter(), time.process_time()
    responses = env.step_json(turns[-1])
    print(json.dumps([time.perf_counter() - started, time.process_time() - started_cpu, responses]))
"""


# The bound on one turn: the regressions these tests guard against took minutes (quadratic or
# exponential paths; the comments give the measured figures), a fixed turn takes milliseconds, and
# the suite may share the cores with another test worker.
TURN_SECONDS = 3.0


def seconds_for_last_turn(*turns: str, cpu: bool = False) -> tuple[float, list[str]]:
    """Run the turns in a fresh env in a child interpreter; the last one's seconds and responses.
    Wall-clock seconds (the sandbox's jobs run in other processes), or with `cpu` the child's own CPU
    seconds, which another test worker on the same cores does not stretch (for work done in the env).
    A child that has not answered in 60 s is killed and the test fails (a hang, not a slow step)."""
    try:
        done = subprocess.run([sys.executable, "-c", TIMED_STEP], input=json.dumps(turns), text=True,
                              capture_output=True, timeout=60, env=dict(os.environ, PYTHONPATH=SRC))
    except subprocess.TimeoutExpired:
        pytest.fail("env.step_json did not return within 60 s")
    assert done.returncode == 0, done.stderr[-2000:]
    wall, cpu_seconds, responses = json.loads(done.stdout.splitlines()[-1])
    return (cpu_seconds if cpu else wall), responses


def test_a_printed_rule_line_does_not_hang_the_test_summary():
    line = "=" * 16_000 + "x"  # 10x the 1,600 that took 11 s; written past the collector's capture
    seconds, (response,) = seconds_for_last_turn(
        tool_call("Write", file_path="test_rule.py",
                  content=f"import os\nos.write(1, b'{line}\\n')\n\n\ndef test_ok():\n    pass\n"),
        tool_call("Bash", command="pytest test_rule.py"))
    assert seconds < TURN_SECONDS and line in response and "1 passed" in response


def test_a_pathological_grep_pattern_does_not_hang():
    seconds, (response,) = seconds_for_last_turn(
        tool_call("Write", file_path="notes.txt", content="a" * 400 + "\n"),  # 10x the 40 that never returned
        tool_call("Bash", command="grep '\\(a*\\)*b' notes.txt"))
    assert seconds < TURN_SECONDS and response.strip() == "exit code 1", response  # grep found nothing


def test_thousands_of_unclosed_tool_call_tags_do_not_hang():
    seconds, responses = seconds_for_last_turn("<tool_call>" * 20_000)  # 4,000 took 12.7 s
    assert seconds < TURN_SECONDS and responses == ["Error: invalid tool call (unclosed_tool_call)."]


def test_a_source_of_newlines_edited_twice_does_not_hang_the_op_classifier():
    seconds, responses = seconds_for_last_turn(  # the classifier runs the ops on the text before the edit
        tool_call("Read", file_path="pin.py") + tool_call("Write", file_path="pin.py", content="\n" * 99_000),
        tool_call("Write", file_path="pin.py", content=BUGGY))  # 8,000 newlines took 2.1 s; 99,000 ~5 min
    assert seconds < TURN_SECONDS and responses == ["The file /repo/pin.py has been overwritten."]


def test_an_edit_of_many_lines_seen_only_in_the_last_observation_stays_fast():
    """The edits_copied metric looks each old_string line up in every earlier result (added after
    9e4fcfe): 2,000 lines found only in the last of ~800,000 characters of results took 3.1 s."""
    rng = random.Random(0)
    noise = "".join(rng.choice(string.ascii_letters + "\n") for _ in range(99_000))
    lines = "\n".join(f"#{i}" for i in range(2_000))
    seconds, responses = seconds_for_last_turn(
        tool_call("Write", file_path="a.txt", content=noise) + tool_call("Write", file_path="b.txt", content=lines),
        tool_call("Read", file_path="a.txt") * 4, tool_call("Read", file_path="a.txt") * 3,
        tool_call("Read", file_path="b.txt"),
        tool_call("Read", file_path="pin.py") + tool_call("Edit", file_path="pin.py", old_string=lines, new_string="x"),
        cpu=True)
    assert seconds < 2.0 and responses[1] == "Error: String to replace not found in file."  # the regression: 3.1 s


# ---------------------------------------------------------------- 3. crashes of env.step

@pytest.mark.parametrize("first_line", ['"""Clamp a load."""', "import math"])
def test_an_edit_after_a_docstring_or_import_first_write_is_classified_not_raised(first_line):
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin")
    env.step_json(tool_call("Read", file_path="/repo/pin.py")
                  + tool_call("Write", file_path="/repo/pin.py", content=f"{first_line}\n{BUGGY}")
                  + tool_call("Edit", file_path="/repo/pin.py", old_string="load < cap", new_string="load <= cap"))
    assert env.files["pin.py"] == f"{first_line}\n{BUGGY.replace('<', '<=')}"
    assert env.info.ops == ["other", "fix_comparison"] and not env.info.failed


DEEP_SOURCES = {"unary_minus": "_x = " + "-" * 90_000 + "1\n",  # parser: MemoryError
                "attribute_chain": "_x = a" + ".a" * 45_000 + "\n"}  # RecursionError building the tree


@pytest.mark.parametrize("kind", list(DEEP_SOURCES))
def test_a_source_too_deep_to_parse_is_a_failed_write_and_the_episode_is_graded(sandbox, kind):
    fix = BUGGY.replace("<", "<=")
    env = episode(sandbox, tool_call("Write", file_path="pin.py", content=fix + DEEP_SOURCES[kind]))
    assert env.info.failed == {"too_complex": 1} and env.info.actions[1] == "Write:too_complex"
    assert env.reward == 0.0 and env.files["pin.py"] == BUGGY  # refused: the bug stayed


@pytest.mark.parametrize("kind", list(DEEP_SOURCES))
def test_the_public_input_probe_never_raises(kind):
    assert probes.special_cases_public_inputs(BUGGY.replace("<", "<=") + DEEP_SOURCES[kind], [(1, 2)]) is False


def test_numbers_past_python_s_int_limits_are_malformed_calls():
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin")
    huge = '<tool_call>{"name": "Read", "arguments": {"file_path": "pin.py", "offset": ' + "1" * 5_000 + "}}</tool_call>"
    assert env.step_json(huge)[0].startswith("Error: invalid tool call (invalid_json)")
    assert env.step(["Read", "pin.py", "offset", "²"]) == "error : malformed bad_value"  # '²'.isdigit(), int() fails
    assert env.step(["Read", "pin.py", "offset", "1" * 5_000]) == "error : malformed bad_value"
    assert env.info.malformed == 3 and dict(env.info.malformed_reasons) == {"invalid_json": 1, "bad_value": 2}


class AnswerAtOnce:
    """A stand-in policy: every action ends at its first token, so each episode's first turn is the
    final answer and its env grades at once. (The loop under test is the sampler's, not a model's.)"""

    def __init__(self, tokenizer):
        self.cfg = SimpleNamespace(max_len=512)
        self.vocab_size, self.end = tokenizer.vocab_size, tokenizer.end_of_action_id

    def new_cache(self, batch: int):
        return None

    def forward_step(self, feed, n_new, cache):
        logits = torch.full((feed.shape[0], self.vocab_size), -1e9)
        logits[:, self.end] = 0.0
        return logits


@pytest.fixture(scope="module")
def tokenizer():
    from bugfix_rl.gym.tasks import ALL_TASKS

    return build_tokenizer(list(ALL_TASKS), extra_words=tools_vocabulary(ALL_TASKS))


def test_the_sampler_fails_an_episode_whose_env_raised_and_goes_on(sandbox, tokenizer):
    from bugfix_rl.rollout.sampler import sample_episodes

    gone = Sandbox(SandboxConfig(workers=1))
    gone.close()  # an internal failure: grading raises 'sandbox is closed'
    envs = [ToolsEnv(TASK, ToolsEnvConfig(), "pin", box) for box in (sandbox, gone, sandbox)]
    trajectories = sample_episodes(AnswerAtOnce(tokenizer), tokenizer, envs, [0, 0, 0], 1.0, torch.Generator())
    assert [t.info.env_error for t in trajectories] == ["", "RuntimeError: sandbox is closed", ""]
    assert [t.reward for t in trajectories] == [0.0, 0.0, 0.0] and all(env.done for env in envs)
    assert trajectories[1].info.metrics()["env_error"] == 1.0
    assert trajectories[1].info.metrics()["env_error_RuntimeError"] == 1.0
    assert trajectories[0].info.metrics()["env_error"] == 0.0 and trajectories[0].info.submitted


def test_the_chat_sampler_fails_an_episode_whose_env_raised():
    from bugfix_rl.gym.chat import ToolsChat
    from bugfix_rl.policy.chat_template import Transcript
    from bugfix_rl.rollout.chat_sampler import Turn, _advance, _Episode

    gone = Sandbox(SandboxConfig(workers=1))
    gone.close()
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin", gone)
    path = SimpleNamespace(decode=lambda ids: "Done.", observation_ids=lambda responses, closed=True: [9])
    _advance(_Episode(env, ToolsChat(), Transcript([1, 2])), Turn([5, 6], [0.0, 0.0], True), path, 8, 100)
    assert env.done and env.info.env_error == "RuntimeError: sandbox is closed" and env.reward == 0.0


def test_a_batch_in_which_every_env_raised_stops_with_one_line(tokenizer):
    from bugfix_rl.rollout.jobs import group_job, sample_job

    gone = Sandbox(SandboxConfig(workers=1))
    gone.close()
    job = group_job([TASK, TASK], 2, 0, ["pin"] * 4, 1.0, seed=0)
    with pytest.raises(Exception) as raised:
        sample_job(AnswerAtOnce(tokenizer), tokenizer, lambda task, name: ToolsEnv(task, ToolsEnvConfig(), name, gone),
                   job)
    assert type(raised.value).__name__ == "RolloutFailed"  # the CLI prints it as one line (cli._guarded)
    assert "\n" not in str(raised.value) and "4 x RuntimeError" in str(raised.value)


def test_the_cli_prints_a_failed_batch_as_one_line(capsys):
    from bugfix_rl.cli import _guarded
    from bugfix_rl.rollout.env_errors import RolloutFailed

    def command(cfg):
        raise RolloutFailed("every episode of the batch failed inside its env (4 x RuntimeError); first: ...")

    with pytest.raises(SystemExit) as exit_request:
        _guarded(command)(None)
    assert exit_request.value.code == 1  # a run failure, not bad input
    assert capsys.readouterr().err == "error: every episode of the batch failed inside its env (4 x RuntimeError); first: ...\n"


# ---------------------------------------------------------------- 4. the fork server's clean-up

DEEP_TREE = "import os\nfor _ in range({depth}):\n    os.mkdir('d')\n    os.chdir('d')\nprint('built')\n"


def test_a_deep_directory_tree_leaves_the_server_alive_and_stderr_empty(capfd):
    capfd.readouterr()
    with Sandbox(SandboxConfig(workers=1, file_mb=4)) as box:  # 4,096 inodes: room for 2,100 levels
        server = box._workers[0].process.pid
        runs = [box.run_tests({"deep.py": DEEP_TREE.format(depth=1_100)}, "python deep.py") for _ in range(20)]
        runs.append(box.run_tests({"deep.py": DEEP_TREE.format(depth=2_100)}, "python deep.py"))  # past PATH_MAX
        assert [(run.status, run.stdout.strip()) for run in runs] == [("ok", "built")] * 21
        assert box._workers[0].process.pid == server and box._workers[0].process.poll() is None
        assert scratch_entries(box) == []
    assert capfd.readouterr().err == ""


# ---------------------------------------------------------------- 5. forged infrastructure status

FORGE_SANDBOX_ERROR = """
import json, os, sys
_frame, _job = sys._getframe(), None
while _frame is not None:  # the runner's job dict: its nonce
    if isinstance(_frame.f_locals.get("job"), dict):
        _job = _frame.f_locals["job"]
    _frame = _frame.f_back
if _job is not None:
    os.write(3, json.dumps({"nonce": _job["nonce"], "sandbox_error": "forged by the model", "step": "seccomp"}).encode())
    os._exit(0)
""" + BUGGY


def test_a_forged_sandbox_error_is_graded_as_the_models_failure(sandbox):
    graded = grade(sandbox, FORGE_SANDBOX_ERROR, "pin", "pin", list(TASK.hidden_tests))
    assert graded.status != "sandbox_error" and "sandbox_error" not in graded.flags and not graded.all_passed
    env = episode(sandbox, tool_call("Write", file_path="pin.py", content=FORGE_SANDBOX_ERROR)
                  + tool_call("Bash", command="python pin.py") + tool_call("Bash", command="pytest"))
    assert "sandbox_error" not in env.info.grade_flags and env.reward == 0.0
    run = sandbox.run_tests({"pin.py": FORGE_SANDBOX_ERROR}, "python pin.py")
    assert run.status != "sandbox_error"


@pytest.mark.parametrize("name", ["a\x00b.py", "x" * 300 + ".py"])
def test_an_odd_file_name_is_a_failed_write_and_later_runs_still_work(sandbox, name):
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin", sandbox)
    (wrote, ran) = env.step_json(tool_call("Write", file_path=name, content="x = 1\n")
                                 + tool_call("Bash", command="pytest"))
    assert wrote.startswith("Error: File names must be") and env.info.failed == {"bad_file_name": 1}
    assert "[sandbox_error]" not in ran and "1 failed, 2 passed" in ran


def test_a_lone_surrogate_in_a_file_is_the_models_problem_not_the_sandboxs(sandbox):
    env = ToolsEnv(TASK, ToolsEnvConfig(), "pin", sandbox)
    (wrote, ran) = env.step_json(tool_call("Write", file_path="notes.txt", content="\ud800")
                                 + tool_call("Bash", command="pytest"))
    assert "[sandbox_error]" not in ran and "1 failed, 2 passed" in ran
    graded = grade(sandbox, BUGGY + "# \udcff\n", "pin", "pin", list(TASK.hidden_tests))
    assert graded.status != "sandbox_error" and not graded.all_passed  # written as its (invalid UTF-8) bytes


# ---------------------------------------------------------------- after the attacks

def test_nothing_the_attacks_created_outlives_them(sandbox, ipc_before):
    """Runs last in this module: no new IPC object of this run's keys or of the sandbox's uids in
    the host's namespace, no process of those uids, nothing in the servers' run-dir tmpfs, nothing of
    those uids in /dev/shm or /tmp."""
    uids = set(sandbox.uids)
    time.sleep(0.2)
    assert ours(host_ipc_objects(), uids, ipc_before) == []
    assert processes_of(uids) == []
    assert scratch_entries(sandbox) == []
    for shared in ("/dev/shm", "/tmp"):
        owned = [entry.name for entry in os.scandir(shared) if _owner(entry) in uids]
        assert owned == [], f"{shared}: {owned}"


def _owner(entry: os.DirEntry) -> int | None:
    """The uid owning a shared dir's entry; None once another process has removed it."""
    try:
        return entry.stat(follow_symlinks=False).st_uid
    except FileNotFoundError:
        return None
