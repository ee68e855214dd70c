"""What a job's reply means: the results a caller gets (`CallResult`, `RunResult`) and the total reading
of a job's report.

Model code can write its own report, so reading one is total: any bytes, any JSON, any field of any
type end as a status (`crash`, `bad_result`, ...) with a short detail, never as an exception. A
report counts only with the job's nonce and its canary echoed through the value encoder; plain
values are rebuilt from literals (wire.decode), never with pickle or eval.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass

from . import wire

Outcome = tuple[str, object]  # ("value", plain value) or ("error", exception class name)
STATUSES = ("ok", "timeout", "crash", "import_error", "bad_result", "sandbox_error", "bad_command")


@dataclass(frozen=True)
class CallResult:
    """Outputs of one module's function on each input, in order (empty unless status == 'ok')."""

    outputs: list[Outcome]
    status: str
    detail: str = ""


@dataclass(frozen=True)
class RunResult:
    """A `pytest` / `python x.py` run for the tools env's Bash tool. `stdout` has stderr merged in,
    is capped (head + tail) and is model-written text: show it to the agent, never grade on it."""

    stdout: str
    exit_code: int
    status: str
    duration_s: float


def read_report(reply: dict, nonce: str, canary: tuple) -> tuple[dict | None, str]:
    """(report, problem): report is None when there is none; problem is '' when it checks out."""
    if reply.get("lost"):
        return None, "sandbox server lost"
    if not reply.get("result"):
        exit_code, signal_number = reply.get("exit_code"), reply.get("signal")
        return None, (f"killed by signal {signal_number}" if signal_number else f"exited with {exit_code} "
                      "before reporting")
    try:
        report = json.loads(reply["result"])
    except (ValueError, RecursionError):  # bad UTF-8 and ints past the digit limit are ValueErrors
        return None, "bad report: not JSON"
    claimed = report.get("nonce") if type(report) is dict else None
    # compared as bytes: compare_digest raises TypeError on a str with non-ASCII characters
    if type(claimed) is not str or not hmac.compare_digest(claimed.encode("utf-8", "surrogatepass"),
                                                           nonce.encode()):
        return None, "bad report: wrong nonce"
    if reply.get("result_overflow"):
        return report, "bad report: too large"
    try:
        canary_ok = wire.decode(report.get("canary")) == canary
    except ValueError:  # decode raises nothing else
        canary_ok = False
    return report, "" if canary_ok else "bad report: canary mismatch"


def call_outputs(outputs, count: int) -> CallResult:
    """The CallResult of a checked report's `outputs` (any JSON value: the report may be forged with
    a stolen nonce): one outcome per input, else `bad_result`."""
    if type(outputs) is not list:
        return CallResult([], "bad_result", f"malformed outputs: {type(outputs).__name__}")
    if len(outputs) != count:
        return CallResult([], "bad_result", f"{len(outputs)} outputs for {count} inputs")
    try:
        return CallResult([_outcome(item) for item in outputs], "ok")
    except ValueError as error:
        return CallResult([], "bad_result", detail_text(f"malformed outputs: {error}"))


def reported_exit(report: dict) -> tuple[str, int]:
    """(status, exit code) of a checked test-run report. The runner writes an int, or `true` for
    sys.exit(True) (read as 1, as it always was); any other value is forged: `bad_result`."""
    code = report.get("exit_code")
    if type(code) is int:
        return "ok", code
    return ("ok", 1) if type(code) is bool else ("bad_result", 1)


def detail_text(message: str, limit: int = 300) -> str:
    """A report's message cut to `limit` characters, lone surrogates (which JSON's \\udXXX escapes
    let a report carry) replaced by '?', so that printing or logging the detail cannot raise."""
    return message[:limit].encode("utf-8", "replace").decode("utf-8")


def _outcome(item) -> Outcome:
    if type(item) is list and len(item) == 2 and item[0] == "value":
        return ("value", wire.decode(item[1]))
    if type(item) is list and len(item) == 2 and item[0] == "error" and type(item[1]) is str:
        return ("error", item[1][:100])
    raise ValueError(f"malformed outcome {item!r:.80}")
