"""Forged reports (issue 34): whatever model code writes on the result fd becomes a job status.

Model code runs in the job process, so it can write its own report on fd 3, with the job's nonce
and canary stolen from the runner's frames or made up. The trusted side must turn every such report
into a status (`crash`, `bad_result`, ...) and never raise out of `call_function`, `run_tests`,
`grade` or the tools env's step. The unit tests and the fuzz hand forged reports, as the server
passes them on, to the real `Sandbox` methods of a sandbox whose only fake part is `_submit` (no
server, no child); the end-to-end tests write them from model code in a real sandbox. On ac71f44
the overflowing float and the non-ASCII nonce raised out of all of them (OverflowError, TypeError).
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bugfix_rl.gym.tasks import task_by_name
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from bugfix_rl.sandbox import Sandbox, SandboxConfig, grade, wire
from bugfix_rl.sandbox.results import STATUSES

HUGE_FLOAT = ["f", "0x1p+99999"]  # float.fromhex raises OverflowError, not ValueError
SOURCE, CASES = "def f(x):\n    return x\n", [((1,), 1)]  # one input: the forged outputs answer it


class ForgedSandbox(Sandbox):
    """A Sandbox whose every job ends with the report `forge(nonce, canary_tree) -> bytes`, as if
    the job child had written it on fd 3 and exited 0; all code after the reply is the real one."""

    def __init__(self, forge=None):
        self.config, self._workers, self._closed = SandboxConfig(workers=1), [], False
        self._pool = ThreadPoolExecutor(1)
        self.forge = forge

    def _submit(self, job: dict, nonce: str, canary: tuple, *limits) -> dict:
        return server_reply(self.forge(nonce, wire.encode(canary)))  # no time limit reaches a forgery


def server_reply(report: bytes) -> dict:
    """What the server replies for a child that wrote the set-up byte, then `report` (within the
    result cap), and exited 0: server.Server._wait decodes the bytes with errors='replace'."""
    return {"exit_code": 0, "signal": None, "timed_out": False, "setup_error": None,
            "result": report.decode("utf-8", "replace") or None, "result_overflow": False,
            "stdout": "forged\n", "duration_s": 0.01, "leftover": False}


def stolen(**fields):
    """A forge that writes `fields` as JSON with the job's own nonce and canary (model code can read
    both from the runner's frames); a field given as None is left out."""
    def forge(nonce, canary):
        report = {"nonce": nonce, "canary": canary, **fields}
        return json.dumps({k: v for k, v in report.items() if v is not None}).encode()
    return forge


def raw(template: bytes):
    """A forge that writes `template` with b'NONCE' replaced by the job's nonce."""
    return lambda nonce, canary: template.replace(b"NONCE", nonce.encode())


def nested(depth: int, leaf=None) -> list:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def outcomes(forge) -> tuple:
    """(call result, pytest run result, grade result) of the forged report; none may raise."""
    with ForgedSandbox(forge) as box:
        call = box.call_function({"m.py": SOURCE}, "m", "f", [args for args, _ in CASES])
        run = box.run_tests({"m.py": SOURCE}, "pytest")
        graded = grade(box, SOURCE, "m", "f", CASES)
    assert call.status in STATUSES and run.status in STATUSES and graded.status == call.status
    assert type(run.exit_code) is int and type(run.stdout) is str
    assert len(call.detail) <= 300
    call.detail.encode("utf-8")  # shown and logged as text: a lone surrogate would raise here
    assert not graded.all_passed or call.status == "ok"
    return call, run, graded


OK_VALUE = [["value", ["i", "1"]]]
CASES_BY_HOLE = {
    # the two holes this file was written for: on ac71f44 each of these raised out of call_function,
    # run_tests and grade (OverflowError from float.fromhex, TypeError from hmac.compare_digest)
    "overflowing_float_as_canary": (stolen(canary=HUGE_FLOAT, outputs=OK_VALUE, exit_code=0), "bad_result", "crash"),
    "overflowing_float_as_output": (stolen(outputs=[["value", HUGE_FLOAT]], exit_code=0), "bad_result", "ok"),
    "non_ascii_nonce": (raw(b'{"nonce": "' + "é".encode() * 32 + b'", "exit_code": 0}'), "crash", "crash"),
    "lone_surrogate_nonce": (raw(b'{"nonce": "\\ud800NONCE", "exit_code": 0}'), "crash", "crash"),
    "invalid_utf8_in_nonce": (raw(b'{"nonce": "NONCE\xff", "exit_code": 0}'), "crash", "crash"),  # U+FFFD
    # the nonce, the report's shape, its bytes
    "nonce_not_a_string": (raw(b'{"nonce": ["NONCE"], "exit_code": 0}'), "crash", "crash"),
    "nonce_nested_deep": (lambda n, c: json.dumps({"nonce": nested(400, n)}).encode(), "crash", "crash"),
    "invalid_utf8": (raw(b"\xff\xfe{"), "crash", "crash"),
    "not_json": (raw(b'{"nonce": "NONCE",'), "crash", "crash"),
    "report_is_a_list": (raw(b'["NONCE"]'), "crash", "crash"),
    "report_is_nan": (raw(b"NaN"), "crash", "crash"),
    "json_nested_past_the_recursion_limit": (raw(b"[" * 100_000), "crash", "crash"),
    "int_past_the_digit_limit": (raw(b'{"nonce": "NONCE", "exit_code": ' + b"9" * 5000 + b"}"), "crash", "crash"),
    # the canary
    "canary_missing": (raw(b'{"nonce": "NONCE", "outputs": [], "exit_code": 0}'), "bad_result", "crash"),
    "canary_nan": (raw(b'{"nonce": "NONCE", "canary": NaN, "exit_code": 0}'), "bad_result", "crash"),
    "canary_unhashable_key": (stolen(canary=["d", [[["l", []], ["n"]]]], exit_code=0), "bad_result", "crash"),
    "canary_nested_deep": (stolen(canary=nested(500, "t"), exit_code=0), "bad_result", "crash"),
    # the outputs of a call job
    "outputs_missing": (stolen(exit_code=0), "bad_result", "ok"),
    "outputs_a_dict": (stolen(outputs={"value": 1}, exit_code=0), "bad_result", "ok"),
    "outputs_a_string": (stolen(outputs="value", exit_code=0), "bad_result", "ok"),
    "outputs_nan": (raw(b'{"nonce": "NONCE", "canary": CANARY, "outputs": NaN}'), "bad_result", "bad_result"),
    "outputs_too_few": (stolen(outputs=[], exit_code=0), "bad_result", "ok"),
    "outcome_without_value": (stolen(outputs=[["value"]], exit_code=0), "bad_result", "ok"),
    "error_name_not_a_string": (stolen(outputs=[["error", 5]], exit_code=0), "bad_result", "ok"),
    "int_of_4000_digits": (stolen(outputs=[["value", ["i", "9" * 4000]]], exit_code=0), "ok", "ok"),
    "int_of_4001_digits": (stolen(outputs=[["value", ["i", "9" * 4001]]], exit_code=0), "bad_result", "ok"),
    "unhashable_dict_key": (stolen(outputs=[["value", ["d", [[["l", []], ["n"]]]]]], exit_code=0), "bad_result", "ok"),
    "unhashable_tuple_key": (stolen(outputs=[["value", ["d", [[["t", [["l", []]]], ["n"]]]]]]), "bad_result",
                             "bad_result"),
    "value_nested_deep": (stolen(outputs=[["value", nested(500, "l")]], exit_code=0), "bad_result", "ok"),
    "value_a_huge_list_node": (stolen(outputs=[["value", [["n"]] * 20_000]], exit_code=0), "bad_result", "ok"),
    "bytes_not_hex": (stolen(outputs=[["value", ["y", "zz"]]], exit_code=0), "bad_result", "ok"),
    # the import error of a call job
    "import_error_not_a_string": (stolen(import_error=5, exit_code=0), "bad_result", "ok"),
    "import_error_huge_list": (stolen(import_error=list(range(200_000)), exit_code=0), "bad_result", "ok"),
    "import_error_lone_surrogate": (raw(b'{"nonce": "NONCE", "canary": CANARY, "import_error": "x\\udc80",'
                                        b' "exit_code": 0}'), "import_error", "ok"),
    # the exit code of a test run; the runner itself reports ints, and `true` for sys.exit(True)
    "exit_code_missing": (stolen(outputs=OK_VALUE), "ok", "bad_result"),
    "exit_code_a_string": (stolen(outputs=OK_VALUE, exit_code="0"), "ok", "bad_result"),
    "exit_code_a_float": (stolen(outputs=OK_VALUE, exit_code=0.0), "ok", "bad_result"),
    "exit_code_infinity": (raw(b'{"nonce": "NONCE", "canary": CANARY, "exit_code": Infinity}'), "bad_result",
                           "bad_result"),
    "exit_code_a_list": (stolen(outputs=OK_VALUE, exit_code=[0]), "ok", "bad_result"),
    "exit_code_true": (stolen(outputs=OK_VALUE, exit_code=True), "ok", "ok"),
    "exit_code_of_4000_digits": (raw(b'{"nonce": "NONCE", "canary": CANARY, "exit_code": ' + b"9" * 4000 + b"}"),
                                 "bad_result", "ok"),
    # a self-test field in a job's report: only the server reads `checks`, from its own self-test child
    "checks_garbage": (stolen(checks="all fine", exit_code=0), "bad_result", "ok"),
}


def with_canary(forge):
    """`forge`, with b'CANARY' in what it writes replaced by the job's own canary."""
    return lambda nonce, canary: forge(nonce, canary).replace(b"CANARY", json.dumps(canary).encode())


@pytest.mark.parametrize("case", list(CASES_BY_HOLE))
def test_a_forged_report_is_a_status(case):
    forge, call_status, run_status = CASES_BY_HOLE[case]
    call, run, graded = outcomes(with_canary(forge))
    assert (call.status, run.status) == (call_status, run_status), (call.detail, run)


def test_a_forged_import_error_is_shown_as_text_without_lone_surrogates():
    call, _, _ = outcomes(with_canary(CASES_BY_HOLE["import_error_lone_surrogate"][0]))
    assert call.detail == "x?"


def test_exit_codes_the_runner_reports_keep_their_meaning():
    """A forged report that the runner could have written itself is taken at its word."""
    for code, shown in ((0, 0), (1, 1), (2, 2), (-1, -1), (300, 300), (True, 1)):
        _, run, _ = outcomes(stolen(exit_code=code))
        assert (run.status, run.exit_code) == ("ok", shown)


# ---------------------------------------------------------------- fuzz

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
                    max_leaves=12)
TRICKY = st.sampled_from(["0x1p+99999", "-0x1p+99999", "nan", "-inf", "1_0", " 7 ", "zz", "\ud800", "é" * 3, ""]) | \
    st.sampled_from([4000, 4001]).map(lambda digits: "9" * digits)  # ints at and past the decoder's limit
LEAF_NODES = st.one_of(  # per tag: a body the encoder writes, a tricky string, or anything
    st.just(("n",)),
    st.tuples(st.just("b"), st.booleans() | JSON),
    st.tuples(st.just("i"), st.integers().map(str) | TRICKY),
    st.tuples(st.just("f"), st.floats().map(float.hex) | TRICKY),
    st.tuples(st.just("s"), st.text(max_size=6) | TRICKY),
    st.tuples(st.just("y"), st.binary(max_size=4).map(bytes.hex) | TRICKY),
    st.tuples(st.sampled_from("nltdx"), TRICKY | JSON)).map(list)
TAGGED = st.recursive(
    LEAF_NODES,
    lambda kids: st.one_of(st.tuples(st.sampled_from("ltd"), st.lists(kids, max_size=3)).map(list),
                           st.tuples(st.just("d"), st.lists(st.lists(kids, min_size=2, max_size=2), max_size=2))
                           .map(list),
                           JSON),
    max_leaves=12)
OWN = "own"  # stands for the job's own nonce or canary in a drawn report: 3 times in 4, to get past both
OUTCOME = st.tuples(st.sampled_from(["value", "error"]) | JSON, TAGGED | JSON).map(list)
FIELDS = st.one_of(  # one field a job reads, or any of them
    st.fixed_dictionaries({"outputs": st.lists(OUTCOME, min_size=1, max_size=1) | JSON}),
    st.fixed_dictionaries({"import_error": TRICKY | JSON}),
    st.fixed_dictionaries({"exit_code": JSON}),
    st.fixed_dictionaries({}, optional={"outputs": st.lists(OUTCOME, max_size=2), "import_error": JSON,
                                        "exit_code": JSON, "checks": JSON}))


def mostly_own(other):
    """OWN three times in four, else a value of `other` (st.one_of would flatten `other`'s branches)."""
    return st.tuples(st.integers(0, 3), other).map(lambda drawn: OWN if drawn[0] else drawn[1])


REPORTS = st.tuples(mostly_own(JSON), mostly_own(TAGGED), FIELDS).map(
    lambda drawn: {"nonce": drawn[0], "canary": drawn[1], **drawn[2]})


def forged_tree(report: dict):
    """The forge writing `report`, with OWN replaced by the job's nonce and canary; NaN and the
    infinities as JSON's non-standard constants, as Python's json writes them."""
    def forge(nonce, canary):
        fields = {**report, "nonce": nonce if report["nonce"] == OWN else report["nonce"],
                  "canary": canary if report["canary"] == OWN else report["canary"]}
        return json.dumps(fields).encode()
    return forge


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(report=REPORTS)
def test_fuzz_any_report_tree_is_a_status(report):
    outcomes(forged_tree(report))


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(prefix=st.sampled_from([b"", b'{"nonce": "NONCE", "canary": CANARY, ', b'{"nonce": "NONCE", "outputs": [']),
       tail=st.binary(max_size=64))
def test_fuzz_any_report_bytes_are_a_status(prefix, tail):
    outcomes(with_canary(raw(prefix + tail)))


# ---------------------------------------------------------------- end to end

FORGE = """
import json, os, sys
_frame, _job = sys._getframe(), None
while _frame is not None:  # steal the job (nonce, canary) from the runner's frames
    if isinstance(_frame.f_locals.get("job"), dict):
        _job = _frame.f_locals["job"]
    _frame = _frame.f_back
_outputs = [["value", {output}]] * len(_job.get("inputs", []))
os.write(3, json.dumps({{"nonce": {nonce}, "canary": {canary}, "outputs": _outputs, "exit_code": 0}}).encode())
os._exit(0)
"""
PAYLOADS = {  # name: (payload, grade status, run status of `pytest`, of `python m.py`)
    "overflowing_canary": (FORGE.format(nonce='_job["nonce"]', canary=HUGE_FLOAT, output='["i", "1"]'),
                           "bad_result", "crash", "crash"),
    "overflowing_output": (FORGE.format(nonce='_job["nonce"]', canary='_job["canary"]', output=HUGE_FLOAT),
                           "bad_result", "ok", "ok"),
    "non_ascii_nonce": (FORGE.format(nonce='"\\u00e9" * 32', canary='_job["canary"]', output='["i", "1"]'),
                        "crash", "crash", "crash"),
}


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(timeout_s=2.0, cpu_s=1, workers=1)) as box:
        yield box


@pytest.mark.parametrize("payload", list(PAYLOADS))
def test_model_code_forging_its_report_gets_a_status(sandbox, payload):
    code, grade_status, pytest_status, python_status = PAYLOADS[payload]
    source = SOURCE + code
    files = {"m.py": source, "test_m.py": "from m import f\n\n\ndef test_f():\n    assert f(1) == 1\n"}
    graded = grade(sandbox, source, "m", "f", CASES)
    assert (graded.status, graded.all_passed) == (grade_status, False)
    assert sandbox.run_tests(files, "pytest").status == pytest_status
    assert sandbox.run_tests(files, "python m.py").status == python_status


def test_the_tools_env_steps_through_a_forged_report(sandbox):
    buggy = "def pin(load, cap):\n    return load < cap\n"
    env = ToolsEnv(task_by_name("compare/under_cap"), ToolsEnvConfig(max_turns=5), "pin", sandbox)
    read = {"name": "Read", "arguments": {"file_path": "/repo/pin.py"}}
    forging = buggy + PAYLOADS["overflowing_canary"][0]
    write = {"name": "Write", "arguments": {"file_path": "pin.py", "content": forging}}
    bash = {"name": "Bash", "arguments": {"command": "python pin.py"}}
    observations = env.step_json("".join(f"<tool_call>{json.dumps(call)}</tool_call>" for call in (read, write, bash)))
    assert "[crash]" in observations[-1]
    env.step_json("Done.")
    assert env.done and env.reward == 0.0 and "bad_result" in env.info.grade_flags
