"""The tools env's two front-ends: text in -> `ToolCall`s, `ToolResult`s -> observation out.

The tool layer (`gym/tools_env.py`) executes `ToolCall(name, args)` objects and returns `ToolResult`s;
it never sees model text. This module turns model text into calls and results into what the model
reads, in two dialects:

1. Compact words (TinyAgent, word vocabulary). One turn is a word sequence; calls are separated by
   `;`; the turn `done` (or an empty turn) is the final answer.

       Read <file> [offset <n>] [limit <n>]
       Edit <file> [all] old <code words...> new <code words...>     (all = replace_all)
       Write <file> content <code words...>
       Bash <command words...>                                        (joined by single spaces)

   Code words are what `Read` shows: the tokens of `CODE_TOKEN` (the rules of `ops.compact_source`,
   plus `<file>.py` names and a few multi-character operators), `<nl>` between lines, and at a
   line's start one `<indent>` per 4 spaces (`<sp>` per leftover space, `<tab>` per tab).
   `words_to_code` joins them back with fixed PEP 8 spacing (`join_code_words`), so the words
   `<indent> return load < cap` are exactly the text `    return load < cap`, and `return min ( a ,
   b )` is `return min(a, b)`. The Edit tool still does exact string replacement on the file: the
   words only say which string. Old words run from `old` to the first `new`; new words run to the end
   of the call, so `new` cannot occur among old words.

   A file view is exact (`code_to_words_exact`): a string literal is one word, the literal's text
   with `%` and whitespace escaped (`"a%20b"` is `"a b"`), and a line that the PEP 8 spacing would not
   rebuild (an open triple quote, a comment after two spaces, trailing blanks) is one such word
   after its indentation, so the words of any line, copied into an Edit, give back exactly that line.
   The words that are call syntax inside an Edit, `new` and `;`, are written escaped there (`%6Eew`,
   `%3B`), so that a name `new` or a `;` in the code can be copied too.
   Program output is shown readably instead (`code_to_words`: CODE_TOKEN words only), which the
   words do not always rebuild.

   Results: each call's result in call order, joined by ` ; `; any word can occur (the TinyAgent
   tokenizer gives a word outside its vocabulary an episode slot). Read and a successful Edit show the
   file as `1 def pin ( x ) : <nl> 2 <indent> return x` (`empty` past its end); Write and empty
   outputs `ok`; a refused call `error : <kind>`; a malformed one `error : malformed <reason>`; a
   test run its `E` lines and summary (`assert 60 == 20 <nl> + where 60 = pin ( 13 , 20 , 60 ) <nl> 1 failed , 2 passed`), a
   script its output with a traceback cut to its last line; results past `max_words` end in `...`.
   Example turn and observation:

       Edit pin.py old <indent> return load < cap new <indent> return load <= cap ; Bash pytest
       1 def pin ( load , cap ) : <nl> 2 <indent> return load <= cap ; 3 passed

2. JSON tool calls (Qwen3): `<tool_call>{"name": "Edit", "arguments": {...}}</tool_call>` blocks, as
   Qwen3's chat template emits them; text outside the blocks is ignored; a turn without any block is
   the final answer. `TOOL_SCHEMAS` are the OpenAI-format function schemas for
   `apply_chat_template(tools=...)`, and both front-ends validate against them (`validate_call`).
   Results render as Claude-Code-like text (`render_text`), one `<tool_response>` per call.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass

# ---------------------------------------------------------------- what crosses the boundary

TOOL_NAMES = ("Read", "Edit", "Write", "Bash")

MALFORMED_REASONS = (
    "unterminated",        # the turn never ended (token limit): nothing in it is parsed
    "empty_call",          # compact: nothing between two `;`
    "unknown_tool",        # not one of TOOL_NAMES
    "missing_argument",    # a required argument (or compact keyword such as `old`/`new`) is absent
    "unexpected_argument",  # an argument the schema lacks, or extra compact words
    "bad_value",           # wrong JSON type / not an integer / below the minimum / misplaced layout word
    "done_not_alone",      # compact: `done` in a turn that also makes calls
    "invalid_json",        # a <tool_call> body that is not JSON
    "not_an_object",       # JSON that is not {"name": str, "arguments": {...}}
    "unclosed_tool_call",  # <tool_call> without </tool_call>
)


@dataclass(frozen=True)
class ToolCall:
    """A well-formed call: `name` in TOOL_NAMES, `args` valid against its schema."""

    name: str
    args: dict


@dataclass(frozen=True)
class Malformed:
    """A call that could not be parsed or does not match any schema; `reason` in MALFORMED_REASONS."""

    reason: str
    detail: str = ""


@dataclass(frozen=True)
class ToolResult:
    """What one call did. error: None on success, else a failure kind (tools_env.FAILURE_KINDS) or
    'malformed'; text: what the JSON front-end shows; listing: (first line number, lines) when the
    result is a file view (Read, Edit); brief: a shorter text for the compact view (a Bash run whose
    test reports are cut to their `E` lines and summary), else `text` is used."""

    tool: str
    error: str | None = None
    text: str = ""
    reason: str = ""  # the malformed reason when error == 'malformed'
    listing: tuple[int, tuple[str, ...]] | None = None
    brief: str | None = None


# ---------------------------------------------------------------- schemas and validation

def _function(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False}}}


TOOL_SCHEMAS = [
    _function("Read", "Read a file of the repository at /repo. Returns it in `cat -n` format: line number, "
              "tab, line. A file must be read before it is edited or overwritten.", {
                  "file_path": {"type": "string", "description": "The file to read, e.g. /repo/name.py"},
                  "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1-based)"},
                  "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to show"},
              }, ["file_path"]),
    _function("Edit", "Replace an exact string in a file that was read. old_string must occur exactly once "
              "unless replace_all is true. Returns the edited file in `cat -n` format.", {
                  "file_path": {"type": "string", "description": "The file to edit"},
                  "old_string": {"type": "string", "description": "The exact text to replace"},
                  "new_string": {"type": "string", "description": "The text to put in its place"},
                  "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)"},
              }, ["file_path", "old_string", "new_string"]),
    _function("Write", "Create a file at the repository root, or overwrite one that was read.", {
                  "file_path": {"type": "string", "description": "The file to write"},
                  "content": {"type": "string", "description": "The whole new content"},
              }, ["file_path", "content"]),
    _function("Bash", "Run a command in /repo. Available: pytest [file], python -m pytest [file], "
              "python <file>.py, ls, cat <file>, grep [-n] [-i] <pattern> [file], cd /repo, joined by &&.", {
                  "command": {"type": "string", "description": "The command line"},
                  "timeout": {"type": "number", "minimum": 1, "description": "Timeout in milliseconds"},
              }, ["command"]),
]
_PARAMETERS = {schema["function"]["name"]: schema["function"]["parameters"] for schema in TOOL_SCHEMAS}


def _has_type(value, json_type: str) -> bool:
    if json_type == "boolean":
        return type(value) is bool
    if json_type == "integer":
        return type(value) is int
    if json_type == "number":
        return type(value) in (int, float)
    return type(value) is str


def validate_call(name, args) -> ToolCall | Malformed:
    """Check a (name, arguments) pair against TOOL_SCHEMAS; both front-ends end here."""
    if name not in _PARAMETERS:
        return Malformed("unknown_tool", str(name)[:40])
    if not isinstance(args, dict):
        return Malformed("not_an_object", "arguments must be an object")
    params = _PARAMETERS[name]
    for key in args:
        if key not in params["properties"]:
            return Malformed("unexpected_argument", f"{name} has no argument {str(key)[:40]!r}")
    for key in params["required"]:
        if key not in args:
            return Malformed("missing_argument", f"{name} needs {key}")
    for key, value in args.items():
        prop = params["properties"][key]
        if not _has_type(value, prop["type"]):
            return Malformed("bad_value", f"{key} must be {prop['type']}")
        if "minimum" in prop and value < prop["minimum"]:
            return Malformed("bad_value", f"{key} must be >= {prop['minimum']}")
    return ToolCall(name, dict(args))


# ---------------------------------------------------------------- JSON front-end

OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"


def tool_call_blocks(text: str) -> tuple[list[str], bool]:
    """(bodies of the `<tool_call>...</tool_call>` blocks in order, whether an opening tag is left
    unclosed): each block runs from an opening tag to the first closing tag after it. One pass of
    str.find, so linear in the text (a lazy regex rescans the rest of the text from every unclosed tag)."""
    bodies, rest, position = [], [], 0
    while (start := text.find(OPEN_TAG, position)) >= 0:
        end = text.find(CLOSE_TAG, start + len(OPEN_TAG))
        if end < 0:
            break
        rest.append(text[position:start])
        bodies.append(text[start + len(OPEN_TAG):end])
        position = end + len(CLOSE_TAG)
    rest.append(text[position:])
    return bodies, OPEN_TAG in "".join(rest)


def parse_json_calls(text: str | None) -> list[ToolCall | Malformed]:
    """Every <tool_call> block of one assistant turn, in order; [] means the final answer.

    None (the turn hit the token limit) is one unterminated call. A `<tool_call>` left open after the
    last closed block is malformed; so is a block whose JSON is not {"name": ..., "arguments": {...}}.
    """
    if text is None:
        return [Malformed("unterminated")]
    bodies, unclosed = tool_call_blocks(text)
    calls: list[ToolCall | Malformed] = [_json_call(body) for body in bodies]
    if unclosed:
        calls.append(Malformed("unclosed_tool_call"))
    return calls


def _json_call(body: str) -> ToolCall | Malformed:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as error:  # ValueError: bad JSON, or an int past 4,300 digits
        return Malformed("invalid_json", str(error)[:80])
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or set(obj) - {"name", "arguments"}:
        return Malformed("not_an_object", 'expected {"name": ..., "arguments": {...}}')
    return validate_call(obj["name"], obj.get("arguments", {}))


def render_text(result: ToolResult) -> str:
    """The JSON front-end's view of one result (the body of one <tool_response>)."""
    if result.error == "malformed":
        return f"Error: invalid tool call ({result.reason}). {result.text}".rstrip()
    if result.error is not None:
        return f"Error: {result.text}"
    return result.text


def cat_n(first: int, lines: tuple[str, ...]) -> str:
    """`cat -n` layout: right-aligned line number, a tab, the line."""
    return "\n".join(f"{first + i:>6}\t{line}" for i, line in enumerate(lines))


# ---------------------------------------------------------------- code <-> words

CODE_TOKEN = re.compile(
    r"\w+\.py\b|\d+|\w+|\*\*=|//=|>>=|<<=|\*\*|//|<=|>=|==|!=|\+=|-=|\*=|/=|%=|&=|\|=|\^=|->|:=|<<|>>|\S")
NEWLINE, INDENT, SPACE, TAB = "<nl>", "<indent>", "<sp>", "<tab>"
_LEAD_TEXT = {INDENT: "    ", SPACE: " ", TAB: "\t"}
LAYOUT_WORDS = (NEWLINE, INDENT, SPACE, TAB)

_NO_SPACE_BEFORE = frozenset(") ] } , : . ;".split())
_NO_SPACE_AFTER = frozenset("( [ { . ~".split())
_MAYBE_UNARY = frozenset({"-", "+", "*", "**", "@"})
_VALUE_KEYWORDS = frozenset({"True", "False", "None"})


def _ends_value(word: str) -> bool:
    """A word after which `(`/`[` is a call/subscript and `-` is binary."""
    if word in (")", "]", "}") or word in _VALUE_KEYWORDS or is_string_word(word):
        return True
    return (word[0].isalnum() or word[0] == "_") and not keyword.iskeyword(word)


# ---- text words: a string literal, or a line the spacing rules do not rebuild, as one escaped word

_ESCAPED = re.compile(r"%(?:u([0-9A-F]{4})|([0-9A-F]{2}))")
_STRING_PREFIXES = frozenset({"", "r", "u", "f", "b", "br", "rb", "fr", "rf"})  # lower-cased
_QUOTES = "'\""


def escape_text(text: str) -> str:
    """text as one word: `%` and each whitespace character (what str.split splits at) become `%XX`
    (`%uXXXX` past 0xFF), so `"a b"` is `"a%20b"`. No CODE_TOKEN word holds `%` before two hex digits,
    so unescape_word leaves every other word as it is."""
    return "".join(c if c != "%" and not c.isspace() else f"%{ord(c):02X}" if ord(c) < 0x100 else f"%u{ord(c):04X}"
                   for c in text)


def unescape_word(word: str) -> str:
    """The text a word stands for: escape_text undone (every other word is its own text)."""
    if "%" not in word:
        return word
    return _ESCAPED.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), word)


def is_string_word(word: str) -> bool:
    """A whole string literal as one word (`'a'`, `f"x%20{y}"`), not a lone quote."""
    head = word[:3].lower()
    quote = next((i for i, c in enumerate(head) if c in _QUOTES), -1)
    return len(word) > quote + 1 and quote >= 0 and head[:quote] in _STRING_PREFIXES


def _string_end(line: str, start: int, unclosed: set) -> int:
    """The end of the string literal that starts at line[start] (with its prefix), or -1 when none
    does or it does not close on this line. `unclosed` holds the kinds (quote, triple) already seen
    unclosed on this line: a later one of the same kind cannot close either (whether a quote is
    escaped depends only on the backslashes before it), so each kind is scanned to the end once and
    a line costs linear time whatever the model wrote."""
    quote_at = start
    while quote_at < len(line) and quote_at - start < 2 and line[quote_at].isalpha():
        quote_at += 1
    if quote_at >= len(line) or line[quote_at] not in _QUOTES or line[start:quote_at].lower() not in _STRING_PREFIXES:
        return -1
    quote = line[quote_at]
    triple = line.startswith(quote * 3, quote_at)
    kind = (quote, triple)
    if kind in unclosed:
        return -1
    at = quote_at + (3 if triple else 1)
    while at < len(line):
        if line[at] == "\\":
            at += 2
        elif triple and line.startswith(quote * 3, at):
            return at + 3
        elif not triple and line[at] == quote:
            return at + 1
        else:
            at += 1
    unclosed.add(kind)
    return -1


def join_code_words(words: list[str]) -> str:
    """One line's code words -> text with PEP 8 spacing (`min ( a , - 1 )` -> `min(a, -1)`).

    No space before `) ] } , : . ;` or after `( [ { . ~` and unary operators; none before a call's or
    subscript's bracket, around `=` inside a call's parentheses, or after `:` inside brackets `[ ]`
    (slices); one space everywhere else.
    """
    out: list[str] = []
    brackets: list[tuple[str, bool]] = []  # (opening bracket, opened a call/subscript)
    prev, prev_unary = None, False
    for word in map(unescape_word, words):  # an escaped word spaces as its text does
        if prev is not None:
            call_paren = bool(brackets) and brackets[-1] == ("(", True)
            space = not (word in _NO_SPACE_BEFORE or prev in _NO_SPACE_AFTER or prev_unary
                         or (word in ("(", "[") and _ends_value(prev))
                         or ((word == "=" or prev == "=") and call_paren)
                         or (prev == ":" and bool(brackets) and brackets[-1][0] == "["))
            if space:
                out.append(" ")
        out.append(word)
        if word in ("(", "[", "{"):
            brackets.append((word, prev is not None and _ends_value(prev)))
        elif word in (")", "]", "}") and brackets:
            brackets.pop()
        prev_unary = word in _MAYBE_UNARY and (prev is None or not _ends_value(prev))
        prev = word
    return "".join(out)


def line_to_words(line: str) -> list[str]:
    """One line of text -> layout words for its leading whitespace, then CODE_TOKEN words."""
    words, i = [], 0
    while i < len(line) and line[i] in " \t":
        if line.startswith("    ", i):
            words.append(INDENT)
            i += 4
        else:
            words.append(TAB if line[i] == "\t" else SPACE)
            i += 1
    return words + CODE_TOKEN.findall(line[i:])


# Code words that would end an Edit's old words or its call; escaped in exact words (unescape_word reads
# any %XX), as are layout words, which words_to_code would read as layout
_SYNTAX_WORDS = {"new": "%6Eew", ";": "%3B"}  # `;`: CALL_SEPARATOR


def _exact_word(word: str) -> str:
    """A code word or escaped text as an exact word: call syntax and layout words escaped."""
    if word in _SYNTAX_WORDS:
        return _SYNTAX_WORDS[word]
    return f"%{ord(word[0]):02X}{word[1:]}" if word in LAYOUT_WORDS else word


def line_to_words_exact(line: str) -> list[str]:
    """One line of text -> words that words_to_code turns back into exactly this line: layout words,
    then CODE_TOKEN words with each string literal as one escaped word; when those do not rebuild the
    line (spacing other than PEP 8's, a literal left open for the next line, a comment after two
    spaces), its text after the layout words as one escaped word (module doc)."""
    layout = 0
    while layout < len(line) and line[layout] in " \t":
        layout += 1
    words = line_to_words(line[:layout])
    rest, code, at, unclosed = line[layout:], [], 0, set()
    while at < len(rest):
        if rest[at].isspace():
            at += 1
            continue
        end = _string_end(rest, at, unclosed)
        if end < 0:
            end = CODE_TOKEN.match(rest, at).end()  # a non-space character always starts one (`\S`)
            code.append(rest[at:end])
        else:
            code.append(escape_text(rest[at:end]))
        at = end
    if join_code_words(code) != rest:
        code = [escape_text(rest)]
    return words + [_exact_word(word) for word in code]


def file_lines(text: str) -> list[str]:
    """Lines as `cat -n` numbers them: a final newline does not start another line."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def code_to_words(text: str) -> list[str]:
    """Text -> code words, lines separated by `<nl>` (the inverse of words_to_code on PEP 8 code)."""
    return _lines_to_words(text, line_to_words)


def code_to_words_exact(text: str) -> list[str]:
    """Text -> words that words_to_code turns back into exactly this text (line_to_words_exact per line),
    whatever its spacing and literals: what a file view shows, and what an Edit copied from it gives."""
    return _lines_to_words(text, line_to_words_exact)


def _lines_to_words(text: str, line_words) -> list[str]:
    words: list[str] = []
    for index, line in enumerate(file_lines(text)):
        if index:
            words.append(NEWLINE)
        words += line_words(line)
    return words


def words_to_code(words: list[str]) -> str:
    """Code words -> text: `<nl>` splits lines; leading layout words indent; the rest join_code_words
    (an escaped word, `"a%20b"`, is its text: `"a b"`).

    Raises ValueError for a layout word after a line's first code word.
    """
    lines, line = [], []
    for word in list(words) + [NEWLINE]:
        if word != NEWLINE:
            line.append(word)
            continue
        lead = 0
        while lead < len(line) and line[lead] in _LEAD_TEXT:
            lead += 1
        if any(w in LAYOUT_WORDS for w in line[lead:]):
            raise ValueError("layout word inside a line")
        lines.append("".join(_LEAD_TEXT[w] for w in line[:lead]) + join_code_words(line[lead:]))
        line = []
    return "\n".join(lines)


def listing_words(first: int, lines: tuple[str, ...] | list[str]) -> list[str]:
    """A `cat -n` view in words: `1 def f ( x ) : <nl> 2 <indent> return x`."""
    words: list[str] = []
    for i, line in enumerate(lines):
        if i:
            words.append(NEWLINE)
        words += [str(first + i)] + line_to_words_exact(line)
    return words


def listing_lines(words: list[str]) -> list[tuple[int, str]]:
    """Parse listing words back to (line number, line text); the inverse of listing_words."""
    out, line = [], []
    for word in list(words) + [NEWLINE]:
        if word != NEWLINE:
            line.append(word)
            continue
        if not line or not line[0].isdigit():
            raise ValueError("not a listing")
        out.append((int(line[0]), words_to_code(line[1:])))
        line = []
    return out


# ---------------------------------------------------------------- compact front-end

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


# Output lines of a test run that the compact view keeps: `E ...` detail and the summary line. The
# output is model-written (its code prints what it likes), so this is a plain scan of each line, linear
# in its length; a regex such as `^[=_!-]{3,} ?(.*?) ?[=_!-]{3,}$` backtracks for minutes on one line
# of '=' not closed by another rule.
_RULE_CHARS = "=_!-"


def rule_title(line: str) -> str:
    """`=== 1 failed, 2 passed in 0.01s ===` -> `1 failed, 2 passed in 0.01s`: the text between a
    leading and a trailing run of at least 3 rule characters, one space trimmed on each side; '' when
    the line is not such a rule (or the title is empty)."""
    head = len(line) - len(line.lstrip(_RULE_CHARS))
    tail = len(line) - len(line.rstrip(_RULE_CHARS))
    if head < 3 or tail < 3 or head == len(line):
        return ""
    title = line[head:len(line) - tail]
    title = title[1:] if title.startswith(" ") else title
    return title[:-1] if title.endswith(" ") else title


def drop_timing(summary: str) -> str:
    """`1 failed, 2 passed in 0.01s` -> `1 failed, 2 passed`."""
    head, separator, seconds = summary.rpartition(" in ")
    whole, dot, fraction = seconds[:-1].partition(".")
    timed = seconds.endswith("s") and dot and whole.isdecimal() and fraction.isdecimal()
    return head if separator and timed else summary


def summarize_test_output(output: str) -> str:
    """A pytest-style report reduced to its `E` lines, `ERROR:` lines and the summary (no timing)."""
    kept, summary = [], ""
    for line in output.split("\n"):
        stripped = line.strip()
        if stripped.startswith("E ") or stripped == "E":
            kept.append(stripped[1:].strip())
        elif stripped.startswith("ERROR:"):
            kept.append(stripped)
        elif title := rule_title(stripped):
            summary = drop_timing(title)
    return "\n".join([line for line in kept if line] + ([summary] if summary else []))


def summarize_script_output(output: str) -> str:
    """A script's output with any traceback reduced to its last line (`ZeroDivisionError: ...`)."""
    head, _, traceback = output.partition("Traceback (most recent call last):")
    lines = [line for line in traceback.split("\n") if line.strip()]
    return head.rstrip("\n") + ("\n" + lines[-1].strip() if lines else "")


def result_words(result: ToolResult, max_words: int) -> list[str]:
    """The compact view of one result (see the module docstring)."""
    if result.error == "malformed":
        return ["error", ":", "malformed", result.reason]
    if result.error is not None:
        return ["error", ":", result.error]
    if result.listing is not None:
        words = listing_words(*result.listing) or ["empty"]
    else:
        text = result.text if result.brief is None else result.brief
        words = code_to_words("\n".join(line for line in file_lines(text) if line.strip()))
    if len(words) > max_words:
        words = words[:max_words] + ["..."]
    return words or ["ok"]


def observation_words(results: list[ToolResult], max_words: int) -> str:
    """All results of a turn, joined by ` ; `, every word as it is (a word outside the vocabulary takes
    an episode slot of the TinyAgent tokenizer: policy/tokenizer.py)."""
    words: list[str] = []
    for index, result in enumerate(results):
        if index:
            words.append(CALL_SEPARATOR)
        words += result_words(result, max_words)
    return " ".join(words)


# ---------------------------------------------------------------- vocabulary

_BASH_WORDS = "pytest python -m ls cat grep -n -i -q -v -x cd /repo && exit".split()
_OUTPUT_WORDS = (
    "ok empty code ... error : malformed passed failed skipped errors no tests ran where assert + = Error ERROR "
    "file or directory not found Interrupted during collection Traceback most recent call last File line "
    "in module SyntaxError IndentationError NameError TypeError ZeroDivisionError AssertionError "
    "ValueError IndexError invalid syntax integer division by zero modulo is not defined name expected "
    "an indented block unexpected indent object ' \" print len abs sum int str list dict set tuple sorted "
    "enumerate zip isinstance float bool "
).split()


def call_layer_words() -> set[str]:
    """The words of the call layer itself: tool and keyword words, layout words, malformed reasons,
    Bash and test-output words, line numbers. `gym.tools_env.tools_vocabulary` adds the failure kinds
    and every task's repo words."""
    words = set(TOOL_NAMES) | set(COMPACT_KEYWORDS) | set(LAYOUT_WORDS) | set(MALFORMED_REASONS)
    words |= set(_BASH_WORDS) | set(_OUTPUT_WORDS)
    # `?` stood for every word outside the vocabulary before episode slots (issue 35); kept, so that
    # word ids and the checkpoints built on them stay as they were
    return words | {CALL_SEPARATOR, FINAL_ANSWER, "?"} | {str(n) for n in range(100)}
