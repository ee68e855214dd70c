"""The episode's repo: the files a task starts with, and the file tools (Read, Edit, Write) that change them.

Per episode the repo holds `<name>.py` (the buggy source, renamed to `shown_name`) and `test_<name>.py`
(one test function per public test); hidden tests never enter it. The model writes the fix itself.
Every name is a plain file at the root, `/repo` (`repo_path`).

Semantics (SPEC §2), with the choices made here: Read marks a file read; Edit and overwriting Write
need it (`not_read`); a Write marks its file read. Edit checks, in order: file_not_found, not_read,
no_change, not_found, not_unique (then too_large, a size cap on any file Edit or Write leaves,
too_complex, and with `check_edit_syntax` syntax_error: an Edit that would leave a .py file that parses
unparseable is not applied, and the result names the parser's error, as SWE-agent's edit linter
does). Every size is capped (a file, the repo, an Edit's result before it is built), and Write refuses
file names the sandbox could not create (`bad_file_name`) and `.py` files Python's own parser gives up
on (`too_complex`).
"""

from __future__ import annotations

import ast

from bugfix_rl.gym.ops import apply_op
from bugfix_rl.gym.tasks import Task
from bugfix_rl.gym.tools.calls import ToolResult, refusal
from bugfix_rl.gym.tools.code_words import file_lines
from bugfix_rl.gym.tools.render import cat_n
from bugfix_rl.sandbox.sandbox import valid_path

REPO_ROOT = "/repo"
MAX_NAME_CHARS = 100
MAX_REPO_FILES = 32  # with MAX_REPO_CHARS, well inside what one sandbox job takes (sandbox.MAX_FILES, its tmpfs)
MAX_REPO_CHARS = 1_000_000


def source_file(shown_name: str) -> str:
    return f"{shown_name}.py"


def tests_file(shown_name: str) -> str:
    return f"test_{shown_name}.py"


def renamed_source(task: Task, shown_name: str) -> str:
    """The buggy source with only the `def` line's name replaced."""
    return task.source.replace(f"def {task.fn_name}(", f"def {shown_name}(", 1)


def tests_file_text(task: Task, shown_name: str) -> str:
    """`from <name> import <name>` and one `test_<i>` per public case."""
    parts = [f"from {shown_name} import {shown_name}\n"]
    for index, (args, expected) in enumerate(task.public_tests, 1):
        call = f"{shown_name}({', '.join(repr(a) for a in args)})"
        parts.append(f"\n\ndef test_{index}():\n    assert {call} == {expected!r}\n")
    return "".join(parts)


def make_repo(task: Task, shown_name: str) -> dict[str, str]:
    return {source_file(shown_name): renamed_source(task, shown_name),
            tests_file(shown_name): tests_file_text(task, shown_name)}


def issue_words(shown_name: str) -> str:
    """The compact front-end's prompt."""
    return (f"issue : {shown_name} returns wrong results , see {source_file(shown_name)} and "
            f"{tests_file(shown_name)}")


def issue_text(shown_name: str) -> str:
    """The user message of the JSON front-end."""
    return (f"The function `{shown_name}` in {REPO_ROOT}/{source_file(shown_name)} returns wrong results. "
            f"Its tests are in {REPO_ROOT}/{tests_file(shown_name)}. Fix the bug.")


def repo_path(file_path: str) -> str | None:
    """`/repo/x.py`, `./x.py`, `x.py` -> `x.py`; None for anything not a plain name at the root."""
    path = file_path.strip()
    for prefix in (REPO_ROOT + "/", "./"):
        if path.startswith(prefix):
            path = path[len(prefix):]
    if not path or "/" in path or path in (".", ".."):
        return None
    return path


def apply_op_or_none(task, source: str, op: str) -> str | None:
    """apply_op on text a model may have written: ops assume well-formed gym code (a first statement
    that is a `def`, a second line), so any error at all (AttributeError on a docstring-first file,
    MemoryError from the parser, ...) means the op does not describe this edit."""
    try:
        return apply_op(task, source, op)
    except Exception:
        return None


def _parse_error(name: str, source: str) -> Exception | None:
    """What Python's parser raises on a .py file (None when it parses, and for any other file): MemoryError
    or RecursionError (while building the tree) when it runs out of stack, as the sandbox's import would
    too; SyntaxError; ValueError (NUL bytes, lone surrogates)."""
    if not name.endswith(".py"):
        return None
    try:
        ast.parse(source)
    except Exception as error:
        return error
    return None


def _too_deep(error: Exception | None) -> bool:
    """The parser gave up (a refusal); a plain syntax error is the model's to see, unless check_edit_syntax."""
    return isinstance(error, (MemoryError, RecursionError))


def _syntax_refusal(error: Exception) -> ToolResult:
    """An Edit not applied because the file would not parse (a SyntaxError, or a ValueError for a NUL
    byte): the parser's error, message and line for the JSON view; for the compact one its class in the
    vocabulary's words, `IndentationError` (TabError too) or `SyntaxError`, and the line."""
    line = getattr(error, "lineno", None) or 0
    message = str(getattr(error, "msg", error))[:200]
    word = "IndentationError" if isinstance(error, IndentationError) else "SyntaxError"
    return refusal("Edit", "syntax_error", f"{type(error).__name__}: {message} (line {line})",
                   brief=f"{word} line {line}")


class Repo:
    """The files of one episode (`files`: name at the root -> text) and the names the model has read
    (`read`); the methods are the Read, Edit and Write tools. `on_store(name, text)` is called before
    a tool stores `text` as the file `name` (its old text, if any, still in `files`)."""

    def __init__(self, files: dict[str, str], max_file_chars: int, on_store, check_edit_syntax: bool = False):
        self.files = dict(files)
        self.read: set[str] = set()
        self.max_file_chars = max_file_chars  # largest file Edit/Write may leave
        self.on_store = on_store
        self.check_edit_syntax = check_edit_syntax  # refuse an Edit that breaks a .py file's syntax (syntax_error)

    def read_file(self, file_path: str, offset: int = 1, limit: int = 2000) -> ToolResult:
        name = repo_path(file_path)
        if name not in self.files:
            return refusal("Read", "file_not_found", file_path)
        self.read.add(name)
        lines = file_lines(self.files[name])
        shown = tuple(lines[offset - 1: offset - 1 + limit])
        text = cat_n(offset, shown) if shown else f"(the file has {len(lines)} lines; nothing at line {offset})"
        return ToolResult("Read", text=text, listing=(offset, shown))

    def edit_file(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> ToolResult:
        name = repo_path(file_path)
        if name not in self.files:
            return refusal("Edit", "file_not_found", file_path)
        if name not in self.read:
            return refusal("Edit", "not_read")
        if old_string == new_string:
            return refusal("Edit", "no_change")
        text = self.files[name]
        count = text.count(old_string) if old_string else 0
        if count == 0:
            return refusal("Edit", "not_found")
        if count > 1 and not replace_all:
            return refusal("Edit", "not_unique", f"({count} matches)")
        size = len(text) + (count if replace_all else 1) * (len(new_string) - len(old_string))
        if self._too_large(name, size):  # checked before the text is built: replace_all can explode
            return refusal("Edit", "too_large")
        edited = text.replace(old_string, new_string, -1 if replace_all else 1)
        error = _parse_error(name, edited)
        if _too_deep(error):
            return refusal("Edit", "too_complex")
        if self.check_edit_syntax and isinstance(error, (SyntaxError, ValueError)) and _parse_error(name, text) is None:
            return _syntax_refusal(error)
        self._store(name, edited)
        lines = tuple(file_lines(self.files[name]))
        return ToolResult("Edit", text=f"The file {REPO_ROOT}/{name} has been updated. Here's the result of "
                                       f"running `cat -n` on it:\n{cat_n(1, lines)}", listing=(1, lines))

    def write_file(self, file_path: str, content: str) -> ToolResult:
        name = repo_path(file_path)
        if name is None:
            return refusal("Write", "outside_repo", file_path[:MAX_NAME_CHARS])
        if not (len(name) <= MAX_NAME_CHARS and name.isprintable() and valid_path(name)):
            return refusal("Write", "bad_file_name")
        existed = name in self.files
        if existed and name not in self.read:
            return refusal("Write", "not_read")
        if not existed and len(self.files) >= MAX_REPO_FILES:
            return refusal("Write", "too_large", f"(at most {MAX_REPO_FILES} files)")
        if self._too_large(name, len(content)):
            return refusal("Write", "too_large")
        if _too_deep(_parse_error(name, content)):
            return refusal("Write", "too_complex")
        self._store(name, content)
        self.read.add(name)
        verb = "has been overwritten" if existed else "was created"
        return ToolResult("Write", text=f"The file {REPO_ROOT}/{name} {verb}.", brief="")

    def _too_large(self, name: str, size: int) -> bool:
        """Would `name` holding `size` characters exceed the file's or the repo's limit?"""
        repo_size = sum(len(text) for path, text in self.files.items() if path != name) + size
        return size > self.max_file_chars or repo_size > MAX_REPO_CHARS

    def _store(self, name: str, text: str) -> None:
        self.on_store(name, text)
        self.files[name] = text
