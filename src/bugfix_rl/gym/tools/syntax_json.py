"""The JSON call syntax (Qwen3): `<tool_call>{"name": "Edit", "arguments": {...}}</tool_call>` blocks -> `ToolCall`s.

The blocks are those Qwen3's chat template emits; text outside them is ignored; a turn without any
block is the final answer. Each body is checked against `calls.TOOL_SCHEMAS` (`validate_call`). The
blocks are found by one pass of str.find, linear in the text, and `json.loads` reads each body;
the results go back as Claude-Code-like text (`render.render_text`), one `<tool_response>` per call.
"""

from __future__ import annotations

import json

from bugfix_rl.gym.tools.calls import Malformed, ToolCall, validate_call

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
