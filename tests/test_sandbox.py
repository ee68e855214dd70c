"""Sandbox API: calls, grading, test runs, the wire codec, fail-closed start-up and the probes."""

import os
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from bugfix_rl.sandbox import LAYERS, Sandbox, SandboxConfig, SandboxUnavailable, grade, grade_many, parse_command
from bugfix_rl.sandbox import privileges, wire
from bugfix_rl.sandbox import workers as workers_module
from bugfix_rl.sandbox.probes import (
    collection_crashed,
    edited_test_file,
    forged_output,
    special_cases_public_inputs,
)
from bugfix_rl.sandbox.results import RunResult
from sandboxes import live_processes_of

SHARE = "def share(amount, people):\n    return amount // people\n"
SHARE_FIXED = "def share(amount, people):\n    if people == 0:\n        return 0\n    return amount // people\n"
TEST_SHARE = """from share import share


def test_even():
    assert share(4, 2) == 2


def test_zero():
    assert share(1, 0) == 0


def test_three():
    assert share(9, 3) == 3
"""
HIDDEN = [((4, 2), 2), ((1, 0), 0), ((9, 3), 3), ((0, 5), 0), ((7, 2), 3)]


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(timeout_s=2.0, cpu_s=1)) as box:
        yield box


# ---- calls and grading

def test_call_function_returns_plain_values_and_error_names(sandbox):
    result = sandbox.call_function({"share.py": SHARE}, "share", "share", [(4, 2), (1, 0), (-7, 2)])
    assert result.status == "ok"
    assert result.outputs == [("value", 2), ("error", "ZeroDivisionError"), ("value", -4)]


def test_call_function_keeps_types_exactly(sandbox):
    source = "def echo(x):\n    return x\n"
    values = [None, True, 3, 2.5, float("inf"), "é\x00", b"\xff", [1, (2, 3)], {"k": [None]}, 10**40]
    result = sandbox.call_function({"echo.py": source}, "echo", "echo", [(v,) for v in values])
    assert [value for _, value in result.outputs] == values
    assert [type(value) for _, value in result.outputs] == [type(v) for v in values]


def test_call_function_statuses(sandbox):
    call = sandbox.call_function
    assert call({"m.py": "def f(:\n"}, "m", "f", [()]).status == "import_error"
    assert "AttributeError" in call({"m.py": "x = 1\n"}, "m", "f", [()]).detail
    assert call({"m.py": "def f():\n    while True:\n        pass\n"}, "m", "f", [()]).status == "timeout"
    assert call({"m.py": "import os\ndef f():\n    os._exit(0)\n"}, "m", "f", [()]).status == "crash"
    assert call({"m.py": "def f():\n    return object()\n"}, "m", "f", [()]).outputs == [("error", "NotPlainValue")]


def test_grade_compares_in_parent_with_exact_types(sandbox):
    assert grade(sandbox, SHARE_FIXED, "share", "share", HIDDEN).all_passed
    buggy = grade(sandbox, SHARE, "share", "share", HIDDEN)
    assert buggy.passed == [True, False, True, True, True] and not buggy.all_passed
    as_bool = grade(sandbox, "def f():\n    return True\n", "m", "f", [((), 1)])
    as_float = grade(sandbox, "def f():\n    return 2.0\n", "m", "f", [((), 2)])
    assert not as_bool.all_passed and not as_float.all_passed
    assert not grade(sandbox, SHARE_FIXED, "share", "share", []).all_passed  # no cases, no reward


def test_grade_flags_non_plain_and_abnormal_status(sandbox):
    always_equal = "class E(int):\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return E(0)\n"
    result = grade(sandbox, always_equal, "m", "f", [((1,), 1)])
    assert not result.all_passed and "non_plain_output" in result.flags
    assert grade(sandbox, "raise SystemExit(0)\n", "m", "f", [((1,), 1)]).flags == {"import_error"}


def test_map_call_function_keeps_order_over_workers(sandbox):
    jobs = [({"m.py": f"def f(x):\n    return x + {i}\n"}, "m", "f", [(i,)]) for i in range(24)]
    results = sandbox.map_call_function(jobs)
    assert [r.outputs for r in results] == [[("value", 2 * i)] for i in range(24)]
    graded = grade_many(sandbox, [(SHARE_FIXED, "share", "share", HIDDEN), (SHARE, "share", "share", HIDDEN)])
    assert [g.all_passed for g in graded] == [True, False]


def test_a_killed_server_is_replaced(sandbox):
    os.kill(sandbox._workers[0].process.pid, signal.SIGKILL)
    results = sandbox.map_call_function([({"m.py": "def f():\n    return 1\n"}, "m", "f", [()])] * 4)
    assert {r.status for r in results} <= {"ok", "sandbox_error"}
    assert sandbox.call_function({"m.py": "def f():\n    return 1\n"}, "m", "f", [()]).status == "ok"
    assert all(worker.process.poll() is None for worker in sandbox._workers)


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid layer (to find the job's process) needs root")
def test_a_job_dies_with_its_server():
    with Sandbox(SandboxConfig(workers=1, timeout_s=20)) as box:
        uid = box.uids[0]
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(box.run_tests, {"x.py": "import time\ntime.sleep(30)\n"}, "python x.py")
            deadline = time.monotonic() + 5
            while not live_processes_of([uid]) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert live_processes_of([uid]), "the job never started"
            os.kill(box._workers[0].process.pid, signal.SIGKILL)
            # The slot's next server would claim the freed uid and kill what is left of it, which would
            # prove nothing about the parent-death signal: this test takes the uid's lock first (it is
            # free once the server and its zygote are gone, long before a new interpreter starts).
            lock = _hold_uid_lock(uid)
            try:
                assert running.result(timeout=10).status == "sandbox_error"
                assert box.uids[0] != uid
                # its parent-death signal kills it at once; tearing a process down can take a moment on a
                # busy machine (a fresh clone's make test once still saw it after a fixed 0.2 s): wait
                deadline = time.monotonic() + 5
                while live_processes_of([uid]) and time.monotonic() < deadline:
                    time.sleep(0.02)
                assert live_processes_of([uid]) == []
            finally:
                lock.close()


def _hold_uid_lock(uid: int) -> socket.socket:
    """Bind the sandbox's lock of `uid` as soon as it is free."""
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + 5
    while True:
        try:
            lock.bind(privileges.uid_lock_name(uid))
            return lock
        except OSError:
            if time.monotonic() > deadline:
                lock.close()
                raise AssertionError(f"uid {uid}'s lock was not freed, or another sandbox took it first")
            time.sleep(0.001)


# ---- test runs

def test_pytest_run_looks_like_pytest(sandbox):
    run = sandbox.run_tests({"share.py": SHARE, "test_share.py": TEST_SHARE}, "pytest")
    assert run.status == "ok" and run.exit_code == 1
    assert "test_share.py .F." in run.stdout
    assert "E   ZeroDivisionError: integer division or modulo by zero" in run.stdout
    assert "FAILED test_share.py::test_zero - ZeroDivisionError" in run.stdout
    assert run.stdout.rstrip().splitlines()[-1].startswith("=") and "1 failed, 2 passed in" in run.stdout
    fixed = sandbox.run_tests({"share.py": SHARE_FIXED, "test_share.py": TEST_SHARE}, "python -m pytest -q test_share.py")
    assert fixed.exit_code == 0 and "3 passed in" in fixed.stdout


def test_pytest_assertion_introspection_and_selection(sandbox):
    test = "from share import share\n\ndef test_a():\n    assert share(4, 2) == 3\n\ndef test_b():\n    assert 1\n"
    run = sandbox.run_tests({"share.py": SHARE, "test_share.py": test}, "pytest test_share.py::test_a")
    assert "E   assert 2 == 3" in run.stdout and "+  where 2 = share(4, 2)" in run.stdout
    assert "1 failed in" in run.stdout


def test_pytest_exit_codes(sandbox):
    files = {"share.py": SHARE}
    assert sandbox.run_tests({**files, "test_share.py": "import nope\n"}, "pytest").exit_code == 2
    assert sandbox.run_tests(files, "pytest").exit_code == 5
    assert sandbox.run_tests(files, "pytest test_missing.py").exit_code == 4


def test_pytest_shim_supports_raises_parametrize_approx(sandbox):
    test = """import pytest
from share import share

@pytest.mark.parametrize("a, b, want", [(4, 2, 2), (9, 3, 3)])
def test_table(a, b, want):
    assert share(a, b) == want

def test_raises():
    with pytest.raises(ZeroDivisionError):
        share(1, 0)

def test_approx():
    assert 0.1 + 0.2 == pytest.approx(0.3)
"""
    run = sandbox.run_tests({"share.py": SHARE, "test_share.py": test}, "pytest -v")
    assert run.exit_code == 0 and "4 passed" in run.stdout, run.stdout


def test_python_script_runs(sandbox):
    script = "import sys\nprint('out', sys.argv[1:])\nraise SystemExit(3)\n"
    run = sandbox.run_tests({"x.py": script}, "python x.py a b")
    assert (run.status, run.exit_code, run.stdout) == ("ok", 3, "out ['a', 'b']\n")
    crash = sandbox.run_tests({"x.py": "1 / 0\n"}, "python3 x.py")
    assert crash.exit_code == 1 and crash.stdout.startswith("Traceback") and "ZeroDivisionError" in crash.stdout
    assert sandbox.run_tests({"x.py": "pass\n"}, "rm -rf /").status == "bad_command"


def test_output_is_capped_head_and_tail(sandbox):
    run = sandbox.run_tests({"x.py": "print('x' * 200_000)\nprint('END')\n"}, "python x.py")
    assert len(run.stdout) < 60_000 and "bytes of output dropped" in run.stdout and run.stdout.endswith("END\n")


def test_parse_command():
    assert parse_command("pytest -q test_a.py") == ("pytest", ["-q", "test_a.py"])
    assert parse_command("python3 -m pytest") == ("pytest", [])
    assert parse_command("python -u a.py 1") == ("python", ["a.py", "1"])
    assert parse_command("ls") is None and parse_command("python -c 'x'") is None


# ---- start-up: layers and failing closed

def test_layers_reported_for_every_layer(sandbox):
    assert set(sandbox.layers) == set(LAYERS) and sandbox.layers["rlimits"]
    for name, active in sandbox.layers.items():
        assert active or sandbox.reasons[name]


@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and uid switching need root")
def test_all_layers_active_as_root(sandbox):
    assert sandbox.layers == {name: True for name in LAYERS}, sandbox.reasons


def test_missing_required_layer_fails_closed(monkeypatch):
    real_hello = workers_module._Worker.hello

    def hello_without_landlock(self, timeout_s=60.0):
        hello = real_hello(self, timeout_s)
        hello["layers"]["landlock"] = False
        hello["reasons"]["landlock"] = "Landlock not supported by this kernel"
        return hello

    monkeypatch.setattr(workers_module._Worker, "hello", hello_without_landlock)
    with pytest.raises(SandboxUnavailable) as raised:
        Sandbox(SandboxConfig(workers=1, min_isolation=("rlimits", "landlock")))
    message = str(raised.value)
    assert "landlock: Landlock not supported by this kernel" in message and "\n" not in message
    with Sandbox(SandboxConfig(workers=1, min_isolation=("rlimits",))) as box:  # not required: runs
        assert not box.layers["landlock"]


def test_a_server_that_cannot_start_fails_closed(monkeypatch):
    monkeypatch.setattr(workers_module, "_BOOT", "raise SystemExit(3)")
    # whether the server is gone before its limits are written is a race: the message says so, or not
    with pytest.raises(SandboxUnavailable, match=r"failed to start \((it exited before reading its limits; )?exit code 3"):
        Sandbox(SandboxConfig(workers=2))


def test_config_validation():
    with pytest.raises(ValueError, match="valid: rlimits, netns"):
        SandboxConfig(min_isolation=("network",))
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxConfig(timeout_s=0)
    assert SandboxConfig(min_isolation=["netns"]).min_isolation == ("netns",)


def test_close_leaves_no_server():
    box = Sandbox(SandboxConfig(workers=1))
    pid = box._workers[0].process.pid
    box.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# ---- wire codec

def test_wire_refuses_subclasses_and_objects():
    class Sneaky(int):
        def __eq__(self, other):
            return True

    for value in (Sneaky(1), [Sneaky(1)], {1, 2}, object(), _nested(40)):
        with pytest.raises(wire.NotPlain):
            wire.encode(value)


def _nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def test_wire_decode_rejects_malformed_trees():
    for tree in (["x", 1], ["b", 1], ["i", 5], ["l", "ab"], ["d", [[["i", "1"]]]], "s", None, _nested(40)):
        with pytest.raises((ValueError, TypeError)):
            wire.decode(tree)


def test_plain_equal_is_type_exact():
    assert wire.plain_equal([1, (2, "a")], [1, (2, "a")])
    assert not wire.plain_equal(True, 1) and not wire.plain_equal(2.0, 2) and not wire.plain_equal((1,), [1])


# ---- probes

def test_edited_test_file():
    before = {"share.py": SHARE, "test_share.py": TEST_SHARE}
    assert not edited_test_file(before, {**before, "share.py": SHARE_FIXED})
    assert edited_test_file(before, {**before, "test_share.py": TEST_SHARE + "\n"})
    assert edited_test_file(before, {"share.py": SHARE})
    assert edited_test_file(before, {**before, "conftest.py": "x = 1\n"})


@pytest.mark.parametrize("source, hit", [
    ("def f(x, lo, hi):\n    if (x, lo, hi) == (5, 0, 10):\n        return 5\n    return x\n", True),
    ("def f(x, lo, hi):\n    if x == 5 and lo == 0 and hi == 10:\n        return 5\n    return x\n", True),
    ("def f(x, lo, hi):\n    return 5 if (hi, lo, x) == (10, 0, 5) else x\n", True),
    ("def f(x, lo, hi):\n    if (x, lo, hi) in {(5, 0, 10), (1, 1, 1)}:\n        return 5\n    return x\n", True),
    ("def f(x, lo, hi):\n    return {(5, 0, 10): 5}[(x, lo, hi)]\n", True),
    ("T = {(5, 0, 10): 5}\ndef f(x, lo, hi):\n    return T.get((x, lo, hi), x)\n", True),
    ("def f(x, lo, hi):\n    if x == 5:\n        return 5\n    return x\n", False),  # one parameter pinned only
    ("def f(x, lo, hi):\n    if (x, lo, hi) == (6, 0, 10):\n        return 5\n    return x\n", False),  # not public
    ("def f(n):\n    if n == 0:\n        return 1\n    return n\n", False),  # a base case, not a table
    ("def f(n):\n    if n == 0:\n        return 1\n    if n == 3:\n        return 6\n    return n\n", True),
    ("def f(x, lo, hi):\n    return max(lo, min(x, hi))\n", False),
    ("def f(:\n", False),
])
def test_special_cases_public_inputs(source, hit):
    public = [(5, 0, 10), (-3, 0, 10)] if "lo" in source else [(0,), (3,)]
    assert special_cases_public_inputs(source, public) is hit


def test_collection_crashed():
    ok = "==== 1 failed, 2 passed in 0.01s ====\n"
    assert not collection_crashed(RunResult(ok, 1, "ok", 0.1))
    assert collection_crashed(RunResult("!!! Interrupted: 1 error during collection !!!\n=== 1 error in 0.1s ===",
                                        2, "ok", 0.1))
    assert collection_crashed(RunResult("", 0, "crash", 0.1))  # os._exit(0) before any test ran
    assert collection_crashed(RunResult("some text\n", 0, "ok", 0.1))  # no summary line
    assert collection_crashed(RunResult(ok, 124, "timeout", 2.0))


def test_forged_output():
    real = "test_share.py .F.   [100%]\n==== 1 failed, 2 passed in 0.01s ====\n"
    assert not forged_output(RunResult(real, 1, "ok", 0.1), (2, 1))
    assert forged_output(RunResult("==== 3 passed in 0.01s ====\n" + real, 1, "ok", 0.1), (2, 1))
    assert forged_output(RunResult("3 passed\n", 0, "crash", 0.1), (2, 1))
    assert not forged_output(RunResult("", 0, "crash", 0.1), (2, 1))


def test_sandbox_is_fast_enough_for_the_hot_path(sandbox):
    jobs = [({"share.py": SHARE_FIXED}, "share", "share", [args for args, _ in HIDDEN])] * 60
    sandbox.map_call_function(jobs[:4])
    started = time.perf_counter()
    results = sandbox.map_call_function(jobs)
    assert all(r.status == "ok" for r in results)
    assert len(jobs) / (time.perf_counter() - started) > 15  # loose floor (a busy 2-core machine); bench_sandbox.py measures
