"""Grading: a function from model-written source run on hidden cases in the sandbox, each output compared
here with its expected value, which never leaves this process."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import wire
from .results import CallResult
from .sandbox import Sandbox


@dataclass(frozen=True)
class GradeResult:
    """Per-case verdicts computed in this process; `flags` names anything suspicious or abnormal."""

    passed: list[bool]
    all_passed: bool
    status: str
    flags: frozenset[str] = field(default_factory=frozenset)


def grade(sandbox: Sandbox, source: str, module: str, function: str,
          cases: list[tuple[tuple, object]]) -> GradeResult:
    """Run `function` from `source` (alone in its run dir as `<module>.py`) on each case's arguments;
    a case passes when the returned plain value equals its expected value, compared here."""
    return grade_many(sandbox, [(source, module, function, cases)])[0]


def grade_many(sandbox: Sandbox, jobs: list[tuple[str, str, str, list]]) -> list[GradeResult]:
    """grade() for each (source, module, function, cases), in parallel over the sandbox's workers."""
    calls = sandbox.map_call_function([({f"{module}.py": source}, module, function,
                                        [tuple(args) for args, _ in cases])
                                       for source, module, function, cases in jobs])
    return [_verdict(call, job[3]) for call, job in zip(calls, jobs)]


def _verdict(call: CallResult, cases: list[tuple[tuple, object]]) -> GradeResult:
    passed = [False] * len(cases)
    if call.status == "ok":
        passed = [kind == "value" and wire.plain_equal(value, want)
                  for (kind, value), (_, want) in zip(call.outputs, cases)]
    flags = set() if call.status == "ok" else {call.status}
    if any(outcome == ("error", "NotPlainValue") for outcome in call.outputs):
        flags.add("non_plain_output")
    return GradeResult(passed, bool(cases) and all(passed), call.status, frozenset(flags))
