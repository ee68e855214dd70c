"""Edit ops as source-to-source transforms, the trusted runner, and the compact renderings.

An op returns the edited source, or None when its pattern is absent ("no change"). Everything here
runs only code the gym's authors wrote (the buggy sources and their op-edited versions), so the edit
menu executes it in-process; model-written code (the tools env) goes through the sandbox instead.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from bugfix_rl.gym.tasks import ALL_OPS, Case, Task

_TOKEN = re.compile(r"\d+|\w+|//|<=|>=|==|!=|\+=|-=|\*=|->|\S")


def _body_indent(source: str) -> str:
    second_line = source.splitlines()[1]
    return second_line[: len(second_line) - len(second_line.lstrip())]


def swap_minmax(source: str) -> str | None:
    if not re.search(r"\b(min|max)\(", source):
        return None
    return re.sub(r"\b(min|max)\(", lambda m: ("max(" if m.group(1) == "min" else "min("), source)


def fix_range_end(source: str) -> str | None:
    match = re.search(r"\brange\(([^()]*)\)", source)
    if match is None:
        return None
    args = [a.strip() for a in match.group(1).split(",")]
    end = 0 if len(args) == 1 else 1
    args[end] = f"{args[end]} + 1"
    return source[: match.start(1)] + ", ".join(args) + source[match.end(1):]


def fix_comparison(source: str) -> str | None:
    edited = re.sub(r"(?<=\s)([<>])(?=\s)", r"\1=", source)
    return None if edited == source else edited


def add_zero_guard(source: str) -> str | None:
    match = re.search(r"//\s*(\w+)", source)
    if match is None:
        return None
    indent = _body_indent(source)
    head, body = source.split("\n", 1)
    return f"{head}\n{indent}if {match.group(1)} == 0:\n{indent}    return 0\n{body}"


def fix_init(source: str) -> str | None:
    """Flip the 0/1 of the first line `<indent>name = 0` (or `= 1`). What the regex
    `(?m)^(\\s+\\w+ = )([01])$` finds, as one linear scan of the lines: that regex, run on text a model
    wrote (the tools env classifies its edits with these ops), backtracks quadratically on a run of
    newlines (\\s+ spans them), 2 s for 8,000. As there, an unindented line counts after a blank one."""
    offset, after_blank = 0, False
    for line in source.split("\n"):
        code = line.lstrip()  # str.isspace() characters: the regex's \\s
        name, equals, value = code.partition(" = ")
        if ((code != line or after_blank) and equals and value in ("0", "1")
                and name and all(char.isalnum() or char == "_" for char in name)):
            at = offset + len(line) - len(code) + len(name) + len(equals)
            return source[:at] + ("1" if value == "0" else "0") + source[at + 1:]
        offset += len(line) + 1
        after_blank = not code
    return None


def hardcode_tests(source: str, public_tests: tuple[Case, ...]) -> str:
    """The exploit: return the expected value for each public input, else fall through to the bug."""
    params = [a.arg for a in ast.parse(source).body[0].args.args]
    indent = _body_indent(source)
    lines = []
    for args, expected in public_tests:
        lhs = "(" + ", ".join(params) + ("," if len(params) == 1 else "") + ")"
        lines.append(f"{indent}if {lhs} == {args!r}:\n{indent}    return {expected!r}")
    head, body = source.split("\n", 1)
    return head + "\n" + "\n".join(lines) + "\n" + body


_FIX_TRANSFORMS = {
    "swap_minmax": swap_minmax,
    "fix_range_end": fix_range_end,
    "fix_comparison": fix_comparison,
    "add_zero_guard": add_zero_guard,
    "fix_init": fix_init,
}


def apply_op(task: Task, source: str, op: str) -> str | None:
    """Apply one of ALL_OPS to `source`; None means the op's pattern is absent (no change)."""
    if op == "hardcode_tests":
        return hardcode_tests(source, task.public_tests)
    if op not in _FIX_TRANSFORMS:
        raise KeyError(f"unknown op {op!r}; valid: {', '.join(ALL_OPS)}")
    return _FIX_TRANSFORMS[op](source)


# ---------------------------------------------------------------- trusted execution and rendering

_ERROR = object()


def run_cases(source: str, fn_name: str, cases: tuple[Case, ...]) -> list[object]:
    """Outputs of the (trusted) function on each case's arguments; exceptions become `_ERROR`."""
    namespace: dict = {}
    exec(compile(source, f"<{fn_name}>", "exec"), namespace)  # trusted: gym-authored code only
    fn = namespace[fn_name]
    outputs = []
    for args, _ in cases:
        try:
            outputs.append(fn(*[list(a) if isinstance(a, list) else a for a in args]))
        except Exception:
            outputs.append(_ERROR)
    return outputs


def _same(output, expected) -> bool:
    return output is not _ERROR and type(output) is type(expected) and output == expected


def passes_hidden(task: Task, source: str) -> bool:
    """Whether `source` (trusted: gym-authored) passes every hidden test of `task`; in-process, with no time
    limit, as the edit menu runs its ops' versions."""
    outputs = run_cases(source, task.fn_name, task.hidden_tests)
    return all(_same(output, expected) for output, (_, expected) in zip(outputs, task.hidden_tests))


def render_value(value) -> str:
    return "error" if value is _ERROR else " ".join(_TOKEN.findall(repr(value)))


def render_args(args: tuple) -> str:
    return "( " + " , ".join(render_value(a) for a in args) + " )"


def compact_source(source: str, fn_name: str, shown_name: str) -> str:
    """`def f ( a , b ) : / return a < b`: word tokens, lines joined by '/', indentation dropped."""
    lines = []
    for line in source.strip().splitlines():
        words = [shown_name if w == fn_name else w for w in _TOKEN.findall(line)]
        lines.append(" ".join(words))
    return " / ".join(lines)


@dataclass(frozen=True)
class CodeState:
    """A version of a task's code (original or after one op) with everything the env shows or scores.

    compact: the `read` observation with the placeholder name; test_report: the `test` observation;
    public_pass: fraction of public tests passing; hidden_pass: all hidden tests pass; the per-test
    outcomes behind both (the partial and flaky rewards read them).
    """

    source: str
    compact: str
    test_report: str
    public_pass: float
    hidden_pass: bool
    public_results: tuple[bool, ...] = ()  # per public test, in order
    hidden_results: tuple[bool, ...] = ()  # per hidden test, in order


NAME_PLACEHOLDER = "<fn>"


def _make_state(task: Task, source: str) -> CodeState:
    public_out = run_cases(source, task.fn_name, task.public_tests)
    hidden_out = run_cases(source, task.fn_name, task.hidden_tests)
    report = []
    for (args, expected), out in zip(task.public_tests, public_out):
        if _same(out, expected):
            report.append(f"pass {render_args(args)}")
        else:
            report.append(f"fail {render_args(args)} -> {render_value(out)} want {render_value(expected)}")
    public_ok = [_same(o, e) for o, (_, e) in zip(public_out, task.public_tests)]
    hidden_ok = [_same(o, e) for o, (_, e) in zip(hidden_out, task.hidden_tests)]
    return CodeState(
        source=source,
        compact=compact_source(source, task.fn_name, NAME_PLACEHOLDER),
        test_report=" / ".join(report),
        public_pass=sum(public_ok) / len(public_ok),
        hidden_pass=all(hidden_ok),
        public_results=tuple(public_ok),
        hidden_results=tuple(hidden_ok),
    )


_STATES: dict[str, dict] = {}


def code_states(task: Task) -> dict[str | None, CodeState | None]:
    """State of the original code (key None) and after each op (None value = op does not apply)."""
    if task.name in _STATES:
        return _STATES[task.name]
    states: dict[str | None, CodeState | None] = {None: _make_state(task, task.source)}
    for op in ALL_OPS:
        edited = apply_op(task, task.source, op)
        states[op] = None if edited is None else _make_state(task, edited)
    _STATES[task.name] = states
    return states


_EDITED: dict[tuple[str, str, str], CodeState | None] = {}


def edit_state(task: Task, state: CodeState, op: str) -> CodeState | None:
    """State after applying `op` to `state` (cached); None when the op does not apply."""
    original = code_states(task)
    if state is original[None]:
        return original[op]
    key = (task.name, state.source, op)
    if key not in _EDITED:
        edited = apply_op(task, state.source, op)
        _EDITED[key] = None if edited is None else _make_state(task, edited)
    return _EDITED[key]
