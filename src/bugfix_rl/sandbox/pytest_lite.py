"""A small pytest look-alike for the tools env's `pytest` command, run inside the sandbox.

Real pytest costs ~150 ms to import per run; this costs nothing (the fork server has it loaded).
It collects `test*` functions (and `Test*` classes' `test*` methods) from `test_*.py` / `*_test.py`
files, runs them, and prints pytest's layout: progress dots, `--tb=short` failures with assertion
introspection (`assert 2 == 3` / `+  where 2 = share(4, 2)`), the short summary, and the
`N failed, M passed in Xs` line; exit codes 0/1/2/4/5 as pytest's. `import pytest` gets a shim with
`raises`, `approx`, `fail`, `skip`, `main` and `mark.parametrize/skip/skipif`; fixtures are not
supported (a test with parameters errors like a missing fixture).

Everything printed here is model-influenced text for the agent to read; nothing grades on it.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import math
import os
import sys
import time
import types
from contextlib import redirect_stdout

WIDTH = 80
_SOURCES: dict[str, str] = {}  # test files as collected: a test that rewrites its file still reports well


class _Skipped(Exception):
    pass


class _Failed(AssertionError):
    pass


def _rule(text: str = "", char: str = "=") -> str:
    return f" {text} ".center(WIDTH, char) if text else char * WIDTH


def main(argv: list[str], report=lambda counts: None) -> int:
    """Collect and run tests named by `argv` (paths, `path::name`, -x, -v, -q); returns the exit code."""
    started = time.perf_counter()
    stop_first = any(arg in ("-x", "--exitfirst") for arg in argv)
    verbose = any(arg in ("-v", "--verbose") for arg in argv)
    targets = [arg for arg in argv if not arg.startswith("-")] or _discover(".")
    sys.modules["pytest"] = _shim()
    print(_rule("test session starts"))
    items, errors, missing = [], [], []
    for target in targets:
        path, _, name = target.partition("::")
        path = os.path.normpath(path)
        if not os.path.exists(path):
            missing.append(path)
            continue
        for file in _discover(path) if os.path.isdir(path) else [path]:
            collected = _collect(file)
            if isinstance(collected, str):
                errors.append((file, collected))
            else:
                items += [item for item in collected if not name or item[1].split("[")[0] == name]
    if missing:
        print(f"ERROR: file or directory not found: {missing[0]}\n")
        print(_rule(f"no tests ran in {time.perf_counter() - started:.2f}s"))
        report({"passed": 0, "failed": 0, "errors": 0, "exit_code": 4})
        return 4
    print(f"collected {len(items)} item{'s' * (len(items) != 1)}" + (f" / {len(errors)} error" if errors else ""))
    print()
    if errors:
        return _finish_collection_errors(errors, started, report)
    outcomes, failures = {"passed": 0, "failed": 0, "skipped": 0}, []
    line, current = "", None
    for index, (file, name, call) in enumerate(items):
        if file != current and not verbose:
            if line:
                print(line)
            line, current = file + " ", file
        outcome, text = _run_one(file, name, call)
        outcomes[outcome] += 1
        if outcome == "failed":
            failures.append((file, name, text))
        if verbose:
            print(f"{file}::{name} {outcome.upper()}".ljust(WIDTH - 6) + f"[{100 * (index + 1) // len(items):3d}%]")
        else:
            line += {"passed": ".", "failed": "F", "skipped": "s"}[outcome]
        if stop_first and failures:
            break
    if line:
        print(line.ljust(WIDTH - 6) + f"[{100 * (index + 1) // len(items):3d}%]")
    if failures:
        print()
        print(_rule("FAILURES"))
        for file, name, text in failures:
            print(_rule(name, "_"))
            print(text)
        print(_rule("short test summary info"))
        for file, name, text in failures:
            print(f"FAILED {file}::{name} - {_headline(text)}"[:WIDTH * 2])
        if stop_first:
            print(_rule("stopping after 1 failures", "!"))
    parts = [f"{outcomes[key]} {key}" for key in ("failed", "passed", "skipped") if outcomes[key]]
    elapsed = time.perf_counter() - started
    print(_rule(f"{', '.join(parts) or 'no tests ran'} in {elapsed:.2f}s"))
    code = 1 if failures else 0 if items else 5
    report({"passed": outcomes["passed"], "failed": outcomes["failed"], "errors": 0, "exit_code": code})
    return code


def _headline(text: str) -> str:
    return next((line[4:] for line in text.splitlines() if line.startswith("E   ")), "")


def _discover(directory: str) -> list[str]:
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        found += [os.path.normpath(os.path.join(root, f)) for f in sorted(files)
                  if f.endswith(".py") and (f.startswith("test_") or f.endswith("_test.py"))]
    return found


def _collect(file: str):
    """[(file, test name, zero-argument callable)] or the collection error text."""
    name = os.path.splitext(os.path.basename(file))[0]
    sys.modules.pop(name, None)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with open(file, encoding="utf-8") as handle:
            _SOURCES[os.path.abspath(file)] = text = handle.read()
        with redirect_stdout(io.StringIO()):
            exec(compile(text, file, "exec"), vars(module))
    except BaseException as error:
        return _format_error(file, error)
    items = []
    for attr, value in list(vars(module).items()):
        if attr.startswith("test") and callable(value) and not isinstance(value, type):
            items += _expand(attr, value)
        elif attr.startswith("Test") and isinstance(value, type):
            for method in [m for m in vars(value) if m.startswith("test")]:
                items += _expand(f"{attr}::{method}", lambda *a, _c=value, _m=method: getattr(_c(), _m)(*a),
                                 getattr(value, method))
    return [(file, test_name, call) for test_name, call in items]


def _expand(name, call, marked=None):
    marked = marked or call
    if getattr(marked, "_skip", None):
        return [(name, _skipper(marked._skip))]
    params = getattr(marked, "_parametrize", None)
    if not params:
        return [(name, call)]
    argnames, rows = params
    expanded = []
    for index, row in enumerate(rows):
        row = row if len(argnames) > 1 else (row,)
        expanded.append((f"{name}[{index}]", lambda _call=call, _row=row: _call(*_row)))
    return expanded


def _skipper(reason):
    def skipped():
        raise _Skipped(reason)
    return skipped


def _run_one(file: str, name: str, call) -> tuple[str, str]:
    captured = io.StringIO()
    try:
        with redirect_stdout(captured):
            call()
        return "passed", ""
    except _Skipped:
        return "skipped", ""
    except BaseException as error:  # a test's sys.exit() is a failure too, as in pytest
        text = _format_error(file, error)
        if captured.getvalue():
            text += "\n" + _rule("Captured stdout call", "-") + "\n" + captured.getvalue()[:2000].rstrip()
        return "failed", text


def _finish_collection_errors(errors, started, report) -> int:
    print(_rule("ERRORS"))
    for file, text in errors:
        print(_rule(f"ERROR collecting {file}", "_"))
        print(text)
    print(_rule("short test summary info"))
    for file, text in errors:
        print(f"ERROR {file} - {_headline(text)}"[:WIDTH * 2])
    print(_rule(f"Interrupted: {len(errors)} error{'s' * (len(errors) != 1)} during collection", "!"))
    print(_rule(f"{len(errors)} error{'s' * (len(errors) != 1)} in {time.perf_counter() - started:.2f}s"))
    report({"passed": 0, "failed": 0, "errors": len(errors), "exit_code": 2})
    return 2


def _format_error(file: str, error: BaseException) -> str:
    """pytest --tb=short: frames from the test file down, then `E   ...` lines."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    start = next((i for i, (frame, _) in enumerate(frames)
                  if os.path.abspath(frame.f_code.co_filename) == os.path.abspath(file)), 0)
    lines = []
    for frame, lineno in frames[start:]:
        source = _source_line(frame.f_code.co_filename, lineno)
        where = frame.f_code.co_name
        lines.append(f"{os.path.relpath(frame.f_code.co_filename)}:{lineno}: in {where}")
        if source:
            lines.append(f"    {source.strip()}")
    if isinstance(error, AssertionError) and not _safe(lambda: error.args, ()):
        explained = _explain_assert(*frames[-1]) if frames else None
        lines += [f"E   {line}" for line in (explained or ["AssertionError"])]
    else:
        message = _safe(lambda: f"{type(error).__name__}: {error}" if str(error) else type(error).__name__,
                        type(error).__name__)
        lines += [f"E   {line}" for line in message[:1000].splitlines() or [type(error).__name__]]
    return "\n".join(lines)


def _safe(function, default):
    try:
        return function()
    except BaseException:
        return default


def _source(filename: str) -> str:
    if os.path.abspath(filename) in _SOURCES:
        return _SOURCES[os.path.abspath(filename)]
    try:
        with open(filename, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return ""


def _source_line(filename: str, lineno: int) -> str:
    lines = _source(filename).splitlines()
    return lines[lineno - 1] if 0 < lineno <= len(lines) else ""


def _explain_assert(frame, lineno: int) -> list[str] | None:
    """Re-evaluate a failing `assert a <op> b` in its frame: ['assert 2 == 3', ' +  where 2 = f(x)']."""
    try:
        tree = ast.parse(_source(frame.f_code.co_filename))
    except (SyntaxError, ValueError):
        return None
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.Assert)
                 and n.lineno <= lineno <= (n.end_lineno or n.lineno)), None)
    if node is None:
        return None
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return [f"assert {ast.unparse(test)}"]
    symbol = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
              ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}[type(test.ops[0])]
    sides = []
    for expression in (test.left, test.comparators[0]):
        code = compile(ast.Expression(expression), "<assert>", "eval")
        value = _safe(lambda: repr(eval(code, frame.f_globals, frame.f_locals))[:200], None)
        if value is None:
            return [f"assert {ast.unparse(test)}"]
        sides.append((expression, value))
    lines = [f"assert {sides[0][1]} {symbol} {sides[1][1]}"]
    lines += [f" +  where {value} = {ast.unparse(expression)}"
              for expression, value in sides if isinstance(expression, ast.Call)]
    return lines


# ---- `import pytest` inside the sandbox

def _shim() -> types.ModuleType:
    shim = types.ModuleType("pytest")

    class Raises:
        def __init__(self, expected, match=None):
            self.expected, self.match, self.value = expected, match, None

        def __enter__(self):
            return self

        def __exit__(self, kind, value, tb):
            if kind is None:
                raise _Failed(f"DID NOT RAISE {self.expected}")
            if not issubclass(kind, self.expected):
                return False
            self.value = value
            return True

    def raises(expected, *args, match=None, **kwargs):
        context = Raises(expected, match)
        if not args:
            return context
        with context:
            args[0](*args[1:], **kwargs)
        return context

    class Approx:
        def __init__(self, expected, rel=1e-6, abs=1e-12):
            self.expected, self.rel, self.abs = expected, rel, abs

        def __eq__(self, other):
            return math.isclose(other, self.expected, rel_tol=self.rel, abs_tol=self.abs)

        def __repr__(self):
            return f"{self.expected!r} ± {self.rel:.1e}"

    def mark_with(attribute, value):
        def decorate(function):
            setattr(function, attribute, value)
            return function
        return decorate

    def fail(reason=""):
        raise _Failed(reason)

    def skip(reason=""):
        raise _Skipped(reason)

    def parametrize(argnames, rows, **_):
        names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        return mark_with("_parametrize", (names, list(rows)))

    shim.raises, shim.approx, shim.fail, shim.skip = raises, Approx, fail, skip
    shim.mark = types.SimpleNamespace(
        parametrize=parametrize,
        skip=lambda reason="skipped": mark_with("_skip", reason),
        skipif=lambda condition, reason="skipped": mark_with("_skip", reason if condition else None),
    )
    shim.fixture = lambda *args, **kwargs: args[0] if args and callable(args[0]) else (lambda f: f)
    shim.main = lambda args=None: main(list(args or []))
    return shim
