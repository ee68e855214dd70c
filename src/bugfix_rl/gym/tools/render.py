"""What the model reads back: each `ToolResult` as JSON-front-end text or as compact words.

JSON front-end (Qwen3): Claude-Code-like text (`render_text`), one `<tool_response>` per call; a file
view in `cat -n` layout (`cat_n`).

Compact view (TinyAgent): each call's result in call order, joined by ` ; `; any word can occur (the
TinyAgent tokenizer gives a word outside its vocabulary an episode slot). Read and a successful Edit
show the file as `1 def pin ( x ) : <nl> 2 <indent> return x` (`empty` past its end; exact words,
`code_words.listing_words`); Write and empty outputs `ok`; a refused call `error : <kind>` (an Edit
refused for a syntax error `error : IndentationError line 3`, the parser's words); a
malformed one `error : malformed <reason>`; a test run its `E` lines and summary (`assert 60 == 20
<nl> + where 60 = pin ( 13 , 20 , 60 ) <nl> 1 failed , 2 passed`), a script its output with a
traceback cut to its last line; results past `max_words` end in `...`. Example turn and observation:

    Edit pin.py old <indent> return load < cap new <indent> return load <= cap ; Bash pytest
    1 def pin ( load , cap ) : <nl> 2 <indent> return load <= cap ; 3 passed
"""

from __future__ import annotations

from bugfix_rl.gym.tools.calls import ToolResult
from bugfix_rl.gym.tools.code_words import code_to_words, file_lines, listing_words
from bugfix_rl.gym.tools.syntax_compact import CALL_SEPARATOR

CUT = "..."  # the word that ends an observation cut at its cap


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
        return ["error", ":"] + (result.brief.split() if result.brief else [result.error])
    if result.listing is not None:
        words = listing_words(*result.listing) or ["empty"]
    else:
        text = result.text if result.brief is None else result.brief
        words = code_to_words("\n".join(line for line in file_lines(text) if line.strip()))
    if len(words) > max_words:
        words = words[:max_words] + [CUT]
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
