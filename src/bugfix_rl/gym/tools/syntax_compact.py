"""The compact call syntax (TinyAgent, word vocabulary): one turn's words -> `ToolCall`s.

One turn is a word sequence; calls are separated by `;`; the turn `done` (or an empty turn) is the
final answer.

    Read <file> [offset <n>] [limit <n>]
    Edit <file> [all] old <code words...> new <code words...>     (all = replace_all)
    Write <file> content <code words...>
    Bash <command words...>                                        (joined by single spaces)

Code words are those of `code_words.py`; `words_to_code` turns them into the text a call carries.
Old words run from `old` to the first `new`; new words run to the end of the call, so `new` cannot
occur among old words (a file view writes a `new` in the code escaped, `%6Eew`). Every word is
looked at once or twice, so a turn parses in time linear in its length. The results of a turn are
shown back as words too (`render.observation_words`).
"""

from __future__ import annotations

from bugfix_rl.gym.tools.calls import TOOL_NAMES, Malformed, ToolCall, validate_call
from bugfix_rl.gym.tools.code_words import words_to_code

CALL_SEPARATOR, FINAL_ANSWER = ";", "done"
COMPACT_KEYWORDS = ("old", "new", "all", "content", "offset", "limit")


def parse_compact_turn(words: list[str] | None) -> list[ToolCall | Malformed]:
    """One turn's words -> calls in order; [] means the final answer (`done` or an empty turn)."""
    if words is None:
        return [Malformed("unterminated")]
    if not words or list(words) == [FINAL_ANSWER]:
        return []
    segments: list[list[str]] = [[]]
    for word in words:
        if word == CALL_SEPARATOR:
            segments.append([])
        else:
            segments[-1].append(word)
    return [parse_compact_call(segment) for segment in segments]


def parse_compact_call(words: list[str]) -> ToolCall | Malformed:
    if not words:
        return Malformed("empty_call")
    tool, rest = words[0], words[1:]
    if tool == FINAL_ANSWER:
        return Malformed("done_not_alone")
    if tool not in TOOL_NAMES:
        return Malformed("unknown_tool", tool)
    if tool == "Bash":
        return validate_call("Bash", {"command": " ".join(rest)} if rest else {})
    if not rest:
        return Malformed("missing_argument", f"{tool} needs a file")
    file_path, rest = rest[0], rest[1:]
    if tool == "Read":
        return _compact_read(file_path, rest)
    if tool == "Write":
        if not rest or rest[0] != "content":
            return Malformed("missing_argument", "Write needs `content`")
        return _with_code(lambda text: {"file_path": file_path, "content": text + "\n" if text else ""},
                          "Write", rest[1:])
    replace_all = bool(rest) and rest[0] == "all"
    rest = rest[1:] if replace_all else rest
    if not rest or rest[0] != "old" or "new" not in rest:
        return Malformed("missing_argument", "Edit needs `old ... new ...`")
    split = rest.index("new")
    try:
        old, new = words_to_code(rest[1:split]), words_to_code(rest[split + 1:])
    except ValueError as error:
        return Malformed("bad_value", str(error))
    args = {"file_path": file_path, "old_string": old, "new_string": new}
    return validate_call("Edit", dict(args, replace_all=True) if replace_all else args)


def _with_code(make_args, tool: str, words: list[str]) -> ToolCall | Malformed:
    try:
        text = words_to_code(words)
    except ValueError as error:
        return Malformed("bad_value", str(error))
    return validate_call(tool, make_args(text))


def _compact_read(file_path: str, rest: list[str]) -> ToolCall | Malformed:
    args: dict = {"file_path": file_path}
    if len(rest) % 2:
        return Malformed("unexpected_argument", " ".join(rest[-1:]))
    for key, value in zip(rest[0::2], rest[1::2]):
        if key not in ("offset", "limit") or key in args:
            return Malformed("unexpected_argument", key)
        if not (value.isascii() and value.isdigit() and len(value) <= 18):
            return Malformed("bad_value", f"{key} must be a number")
        args[key] = int(value)
    return validate_call("Read", args)
