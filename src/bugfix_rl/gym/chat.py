"""Chat front-ends of the two envs, for chat models (Qwen3): the system prompt, the tool schemas given
to `apply_chat_template(tools=...)`, the user message, and one assistant turn's text -> its tool
responses.

A turn's text holds `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, as Qwen3's
template teaches. `None` stands for a turn that never closed (the token limit cut it).

- Edit menu: tools `read`, `test`, `submit` (no arguments) and `edit` (an `op` from an enum). A turn
  with exactly one valid call becomes the gym's words (`read`, `edit swap_minmax`, ...); any other turn
  (no call, several calls, bad JSON, an unknown tool or op, extra arguments) is one malformed call,
  `env.step(None)`, which costs a turn. The env's observation is the one tool response.
- Tools env: every block is a call (`ToolsEnv.step_json`), one tool response per call; a turn without a
  call is the final answer and ends the episode.

`step` returns the responses to show next; the caller reads `env.done` to know whether the episode
ended (then nothing more is shown).
"""

from __future__ import annotations

import json
from typing import Protocol

from bugfix_rl.gym.edit_menu import EditMenuEnv
from bugfix_rl.gym.tasks import ALL_OPS
from bugfix_rl.gym.tools.calls import TOOL_SCHEMAS
from bugfix_rl.gym.tools.env import ToolsEnv
from bugfix_rl.gym.tools.repo import issue_text
from bugfix_rl.gym.tools.syntax_json import tool_call_blocks


class ChatFrontEnd(Protocol):
    """How a chat model talks to one kind of env."""

    system: str
    tools: list[dict]

    def user_message(self, env) -> str: ...

    def step(self, env, text: str | None) -> list[str]: ...


def _function(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required}}}


EDIT_MENU_TOOLS = [
    _function("read", "Show the function's source code.", {}, []),
    _function("edit", "Apply one of the prepared fixes to the function. Only one edit is allowed per episode.",
              {"op": {"type": "string", "enum": list(ALL_OPS), "description": "The fix to apply"}}, ["op"]),
    _function("test", "Run the function's public tests and show the results.", {}, []),
    _function("submit", "Submit the current code; this ends the episode and hidden tests grade it.", {}, []),
]
EDIT_MENU_SYSTEM = ("You fix a bug in one Python function. Call exactly one tool per turn. Read the code before "
                    "you edit it, and submit when you are done.")
TOOLS_SYSTEM = ("You are a coding agent. The repository is at /repo. Use the tools to read, edit and test its "
                "files; you may make up to 4 tool calls in one turn. A reply without a tool call ends the session.")


def edit_menu_words(text: str | None) -> list[str] | None:
    """The gym words of a turn with exactly one valid edit-menu call, else None (malformed)."""
    if text is None:
        return None
    bodies, unclosed = tool_call_blocks(text)
    if len(bodies) != 1 or unclosed:
        return None
    try:
        call = json.loads(bodies[0])
    except (ValueError, RecursionError):  # bad JSON, or an integer past 4,300 digits
        return None
    if not isinstance(call, dict) or set(call) - {"name", "arguments"}:
        return None
    name, arguments = call.get("name"), call.get("arguments", {})
    if name in ("read", "test", "submit") and arguments == {}:
        return [name]
    if name == "edit" and isinstance(arguments, dict) and set(arguments) == {"op"} and arguments["op"] in ALL_OPS:
        return ["edit", arguments["op"]]
    return None


class EditMenuChat:
    system = EDIT_MENU_SYSTEM
    tools = EDIT_MENU_TOOLS

    def user_message(self, env: EditMenuEnv) -> str:
        return env.reset()

    def step(self, env: EditMenuEnv, text: str | None) -> list[str]:
        observation = env.step(edit_menu_words(text))
        return [] if env.done else [observation]


class ToolsChat:
    system = TOOLS_SYSTEM
    tools = TOOL_SCHEMAS

    def user_message(self, env: ToolsEnv) -> str:
        return issue_text(env.shown_name)

    def step(self, env: ToolsEnv, text: str | None) -> list[str]:
        responses = env.step_json(text)
        return [] if env.done else responses


CHAT_FRONT_ENDS: dict[type, ChatFrontEnd] = {EditMenuEnv: EditMenuChat(), ToolsEnv: ToolsChat()}


def chat_front_end(env) -> ChatFrontEnd:
    """The front-end for an env object (looked up by its class)."""
    for kind, front_end in CHAT_FRONT_ENDS.items():
        if isinstance(env, kind):
            return front_end
    raise KeyError(f"no chat front-end for {type(env).__name__}; known: "
                   f"{', '.join(k.__name__ for k in CHAT_FRONT_ENDS)}")
