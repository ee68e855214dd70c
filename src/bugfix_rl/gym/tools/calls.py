"""What crosses the tools env's boundary: `ToolCall`s in, `ToolResult`s out, and the JSON schemas of the calls.

The tool layer (`gym/tools/env.py`, `repo.py`, `shell.py`) executes `ToolCall(name, args)` objects and
returns `ToolResult`s; it never sees model text. Both syntaxes (`syntax_compact.py`, `syntax_json.py`)
turn model text into calls and end in `validate_call`; a call that does not parse or does not match a
schema is a `Malformed` (one of MALFORMED_REASONS); a call a tool refuses is a `ToolResult` whose
`error` is one of FAILURE_KINDS. `TOOL_SCHEMAS` are the OpenAI-format function schemas for
`apply_chat_template(tools=...)`.
"""

from __future__ import annotations

from dataclasses import dataclass

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

FAILURE_KINDS = (
    "file_not_found",  # Read/Edit of a file the repo does not have
    "not_read",        # Edit, or Write over an existing file, before a Read of it
    "not_found",       # Edit: old_string absent (or empty)
    "not_unique",      # Edit: several matches and replace_all false
    "no_change",       # Edit: old_string == new_string
    "outside_repo",    # Write to a path that is not a file at the repo root
    "not_available",   # Bash: a command outside the whitelist
    "too_many_calls",  # a call past max_calls_per_turn
    "too_large",       # Edit/Write: the file would exceed max_file_chars (or the repo MAX_REPO_*)
    "bad_file_name",   # Write: a name the sandbox could not create (NUL, control characters, too long)
    "too_complex",     # Edit/Write: a .py file nested too deeply for Python's parser
    "syntax_error",    # Edit, with env.check_edit_syntax: a .py file that parses would no longer parse (or hold NUL)
)
# Kinds a compact turn cannot cause (its file names are vocabulary words, its actions 48 tokens), kept
# out of the compact vocabulary so that tokenizers and their checkpoints stay as they were.
JSON_ONLY_FAILURES = ("bad_file_name", "too_complex")
# Kinds the compact view names by the parser's own words (`error : IndentationError line 3`, words the
# vocabulary has), not by the kind, for the same reason.
PARSER_NAMED_FAILURES = ("syntax_error",)
COMPACT_FAILURE_KINDS = tuple(kind for kind in FAILURE_KINDS if kind not in JSON_ONLY_FAILURES + PARSER_NAMED_FAILURES)
_FAILURE_TEXT = {
    "file_not_found": "File does not exist.",
    "not_read": "File has not been read yet. Read it first before writing to it.",
    "not_found": "String to replace not found in file.",
    "not_unique": "Found several matches of the string to replace, but replace_all is false. Add more "
                  "context to make it unique, or set replace_all to true.",
    "no_change": "No changes to make: old_string and new_string are exactly the same.",
    "outside_repo": "Files can only be written at the repository root (/repo/<name>).",
    "not_available": "command not available in this sandbox",
    "too_many_calls": "Too many tool calls in one turn; this one was not run.",
    "too_large": "The file would be too large.",
    "bad_file_name": "File names must be 1-100 printable characters, without '/' or NUL.",
    "too_complex": "The file is nested too deeply for Python to parse.",
    "syntax_error": "The edit was not applied: Python could not parse the file after it.",
}


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
    """What one call did. error: None on success, else a failure kind (FAILURE_KINDS) or
    'malformed'; text: what the JSON front-end shows; listing: (first line number, lines) when the
    result is a file view (Read, Edit); brief: a shorter text for the compact view (a Bash run whose
    test reports are cut to their `E` lines and summary; a refusal's words after `error :`, where they are
    not its kind), else `text` is used (a refusal: its kind)."""

    tool: str
    error: str | None = None
    text: str = ""
    reason: str = ""  # the malformed reason when error == 'malformed'
    listing: tuple[int, tuple[str, ...]] | None = None
    brief: str | None = None


def refusal(tool: str, kind: str, detail: str = "", brief: str | None = None) -> ToolResult:
    """The result of a call that `tool` refused: `kind` in FAILURE_KINDS, its text and any detail; brief:
    the compact view's words after `error :` where they are not the kind (PARSER_NAMED_FAILURES)."""
    return ToolResult(tool, kind, (_FAILURE_TEXT[kind] + (f" {detail}" if detail else "")), brief=brief)


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
