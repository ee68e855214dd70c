"""The Bash tool: a whitelist simulation of a shell over the episode's repo, not a shell.

`ls`, `cat` and `grep` read the in-memory repo here; `pytest`, `python -m pytest`, `python
test_<name>.py` (run as that file's tests) and `python <file>.py` go to the `run` callable the env
gives (the sandbox, which the model's code never leaves, under the env's step budget); `cd /repo`
does nothing. Up to MAX_CHAIN commands may be joined by `&&`; any other shell syntax, and any other
command or flag, is refused (`not_available`). Bash's `timeout` is accepted but the sandbox's own
wall limit applies.

The command line is model-written: it is split by `shlex` (no evaluation), grep patterns run on RE2
(linear time, whatever the pattern), and every output is capped at MAX_OUTPUT_CHARS.
"""

from __future__ import annotations

import re
import shlex

import re2

from bugfix_rl.gym.tools.calls import ToolResult, refusal
from bugfix_rl.gym.tools.code_words import file_lines
from bugfix_rl.gym.tools.repo import MAX_NAME_CHARS, REPO_ROOT, repo_path

MAX_CHAIN = 4  # commands joined by && in one Bash call (each may be a sandbox run of up to its timeout)
MAX_OUTPUT_CHARS = 64_000  # of one Bash call's output (cat and grep stop building theirs past it)


class Shell:
    """Bash over one episode's `files` (name -> text; read here, never written) and `run(command,
    test_run) -> (output, exit code, compact brief)`, which runs a pytest or python command line in
    the sandbox (`test_run`: it runs tests, so the brief keeps their `E` lines and summary)."""

    def __init__(self, files: dict[str, str], run):
        self.files = files
        self._run = run

    def bash(self, command: str, timeout: float | None = None) -> ToolResult:
        steps = _split_chain(command)
        if steps is not None and len(steps) > MAX_CHAIN:
            return refusal("Bash", "not_available", f"(at most {MAX_CHAIN} commands joined by &&)")
        plans = None if steps is None else [self._plan_command(argv) for argv in steps]
        if plans is None or any(plan is None for plan in plans):
            return refusal("Bash", "not_available")
        texts, briefs, code = [], [], 0
        for plan in plans:
            output, code, brief = plan()
            texts.append(output)
            briefs.append(brief)
            if code != 0:
                break
        tail = f"\nexit code {code}" if code else ""
        return ToolResult("Bash", text=_clip("".join(texts).rstrip("\n")) + tail,
                          brief=_clip("\n".join(b.rstrip("\n") for b in briefs if b.strip())) + tail)

    def _plan_command(self, argv: list[str]):
        """A zero-argument callable -> (output, exit code, compact brief) for a whitelisted command,
        else None."""
        head, args = argv[0], argv[1:]
        if head == "cd":
            return (lambda: ("", 0, "")) if args in ([REPO_ROOT], [REPO_ROOT + "/"], ["."]) else None
        if head == "ls":
            if all(a in ("-l", "-a", "-la", "-al", "-1", ".", REPO_ROOT, REPO_ROOT + "/") for a in args):
                return lambda: same_brief("".join(f"{name}\n" for name in sorted(self.files)), 0)
            return None
        if head == "cat":
            return (lambda: self._cat(args)) if args and not any(a.startswith("-") for a in args) else None
        if head == "grep":
            return self._plan_grep(args)
        python = head in ("python", "python3")
        if head == "pytest" or (python and args[:2] == ["-m", "pytest"]):
            args = args if head == "pytest" else args[2:]
            flags = [a for a in args if a.startswith("-")]
            targets = [_pytest_target(a) for a in args if not a.startswith("-")]
            if None in targets or not all(_PYTEST_FLAG.fullmatch(flag) for flag in flags):
                return None
            return lambda: self._run(shlex.join(["pytest", *flags, *filter(None, targets)]), True)
        if python and args and args[0].endswith(".py"):
            name = repo_path(args[0])
            if name is None:
                return None
            if name.startswith("test_") and len(args) == 1:  # runs that file's tests, as in the book
                return lambda: self._run(shlex.join(["pytest", name]), True)
            return lambda: self._run(shlex.join(["python", name, *args[1:]]), False)
        return None

    def _cat(self, names: list[str]) -> tuple[str, int, str]:
        out, code = [], 0
        size = 0
        for arg in names:
            if size > MAX_OUTPUT_CHARS:  # `cat x x x ...`: stop building what _clip would drop
                break
            name = repo_path(arg)
            if name in self.files:
                out.append(self.files[name])
            else:
                out.append(f"cat: {arg[:MAX_NAME_CHARS]}: No such file or directory\n")
                code = 1
            size += len(out[-1])
        return same_brief("".join(out), code)

    def _plan_grep(self, args: list[str]):
        flags = set()
        while args and args[0].startswith("-") and len(args[0]) > 1:
            if not set(args[0][1:]) <= {"n", "i"}:
                return None
            flags |= set(args[0][1:])
            args = args[1:]
        if not args:
            return None
        pattern, targets = args[0], args[1:]

        def grep():
            try:
                regex = _grep_regex(pattern, "i" in flags)
            except (re2.error, ValueError):  # ValueError: a pattern RE2 cannot take (lone surrogates)
                return same_brief(f"grep: invalid regular expression: {pattern[:MAX_NAME_CHARS]}\n", 2)
            names = [repo_path(t) or t for t in targets] or sorted(self.files)
            out, found, missing, size = [], False, False, 0
            for name in names:
                if size > MAX_OUTPUT_CHARS:  # `grep x f f f ...`: stop building what _clip would drop
                    break
                if name not in self.files:
                    out.append(f"grep: {name[:MAX_NAME_CHARS]}: No such file or directory\n")
                    missing = True
                    continue
                text = self.files[name]
                searchable = text.encode("utf-8", "replace").decode("utf-8")  # RE2 takes no lone surrogates
                for number, (line, plain) in enumerate(zip(file_lines(text), file_lines(searchable)), 1):
                    if regex.search(plain):
                        found = True
                        prefix = (f"{name}:" if len(names) > 1 else "") + (f"{number}:" if "n" in flags else "")
                        out.append(f"{prefix}{line}\n")
                        size += len(out[-1])
            return same_brief("".join(out), 2 if missing else 0 if found else 1)

        return grep


def same_brief(output: str, code: int) -> tuple[str, int, str]:
    """(output, exit code, brief) of a command whose compact brief is its whole output."""
    return output, code, output


def _clip(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + "\n[... output truncated ...]"


_PYTEST_FLAG = re.compile(r"-[qvxs]+|--(quiet|verbose|exitfirst|tb=\w+|no-header)|-r\w+")
_SHELL_OPERATOR = re.compile(r"[;&|<>()]+")


def _pytest_target(arg: str) -> str | None:
    """`/repo/test_x.py::test_1` -> `test_x.py::test_1`; `.` or `/repo` -> '' (all); None outside."""
    path, separator, test = arg.partition("::")
    if path in (".", "./", REPO_ROOT, REPO_ROOT + "/"):
        return ""
    name = repo_path(path)
    return None if name is None else name + separator + test


def _split_chain(command: str) -> list[list[str]] | None:
    """`cd /repo && pytest -q` -> [['cd', '/repo'], ['pytest', '-q']]; None for anything beyond `&&`."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes
        return None
    steps: list[list[str]] = [[]]
    for token in tokens:
        if token == "&&":
            steps.append([])
        elif _SHELL_OPERATOR.fullmatch(token):
            return None
        else:
            steps[-1].append(token)
    return steps if all(steps) else None


_GREP_OPTIONS = {}


def _grep_regex(pattern: str, ignore_case: bool):
    """The grep pattern compiled by RE2 (linear time in the text, whatever the pattern: `\\(a*\\)*b`
    on 400 `a`s takes microseconds, where Python's re never returns). RE2 has no backreferences:
    a pattern with one is an invalid expression here. Compile errors are not logged to stderr."""
    if ignore_case not in _GREP_OPTIONS:
        options = re2.Options()
        options.log_errors = False
        options.case_sensitive = not ignore_case
        _GREP_OPTIONS[ignore_case] = options
    return re2.compile(_basic_to_python_regex(pattern), _GREP_OPTIONS[ignore_case])


def _basic_to_python_regex(pattern: str) -> str:
    """grep's basic regular expressions: `( ) { } | + ?` are literal unless backslashed."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            following = pattern[i + 1]
            out.append(following if following in "(){}|+?" else "\\" + following)
            i += 2
            continue
        out.append("\\" + char if char in "(){}|+?" else char)
        i += 1
    return "".join(out)
