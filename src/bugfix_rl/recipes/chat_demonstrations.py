"""Oracle demonstrations for a chat model (`policy=qwen3` with `cold_start.enabled=true`).

A chat demonstration is built through the same token path as a sampled episode (`ChatTokenPath`): the
prompt the template renders, each assistant turn as the ids of its text plus `<|im_end|>` (policy
tokens), each observation as the template's tool-response block and next generation prompt. So SFT
trains exactly the ids a sampled episode of the same conversation would hold, and the structural
policy mask (preflight check 1) marks exactly the demonstrated turns.

The chat oracles play the scripted oracles' rule (`gym/agents/scripted.py:infer_op`) in JSON tool calls:
edit menu `read` -> `edit` with the rule's op -> `test` -> `submit`; tools env `Read` -> one exact-line
`Edit` applying the op and `Bash pytest` in the same turn -> a final answer without calls.
"""

from __future__ import annotations

import difflib
import json
import re

from bugfix_rl.gym import ops
from bugfix_rl.gym.agents.scripted import infer_op
from bugfix_rl.gym.chat import chat_front_end
from bugfix_rl.gym.tools.code_words import code_to_words
from bugfix_rl.policy.chat_template import Transcript
from bugfix_rl.types import Trajectory

CAT_N_LINE = re.compile(r"^ *\d+\t(.*)$")


def call_text(name: str, arguments: dict) -> str:
    """One tool call as Qwen3 writes it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class EditMenuChatOracle:
    """read -> edit <the rule's op> -> test -> submit, as chat tool calls."""

    def __init__(self):
        self.plan: list[str] = []

    def start(self, user_message: str) -> str:
        return call_text("read", {})

    def __call__(self, responses: list[str]) -> str:
        if responses and responses[0].startswith("def "):
            op = infer_op(responses[0].split())
            self.plan = [call_text("edit", {"op": op}), call_text("test", {}), call_text("submit", {})]
        return self.plan.pop(0) if self.plan else call_text("submit", {})


class ToolsChatOracle:
    """Read -> Edit (the rule's op on the lines it changes) + Bash pytest -> a final answer."""

    def __init__(self):
        self.file: str | None = None
        self.edited = False

    def __call__(self, responses: list[str]) -> str:
        lines = responses[0].splitlines() if responses else []
        if not self.edited and lines and CAT_N_LINE.match(lines[0]):  # the Read listing
            self.edited = True
            source = "\n".join(CAT_N_LINE.match(line).group(1) for line in lines) + "\n"
            fixed = getattr(ops, infer_op(code_to_words(source)))(source)
            if fixed is not None:
                old, new = changed_lines(source, fixed)
                return (call_text("Edit", {"file_path": self.file, "old_string": old, "new_string": new})
                        + "\n" + call_text("Bash", {"command": "pytest"}))
        return "The bug is fixed and the tests pass."

    def start(self, user_message: str) -> str:
        self.file = next(w.strip(".,`") for w in user_message.split() if w.strip(".,`").endswith(".py")
                         and "/test_" not in w)
        return call_text("Read", {"file_path": self.file})


def changed_lines(source: str, fixed: str) -> tuple[str, str]:
    """(old, new): the smallest run of whole lines that differs, widened by neighbouring lines until old
    is non-empty and occurs once in source (an op that only inserts lines changes no old line)."""
    a, b = source.splitlines(), fixed.splitlines()
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    i1, i2, j1, j2 = changes[0][1], changes[-1][2], changes[0][3], changes[-1][4]
    while True:
        old = "\n".join(a[i1:i2])
        if (old.strip() and source.count(old) == 1) or (i1 == 0 and i2 == len(a)):
            return old, "\n".join(b[j1:j2])
        if i1 > 0:  # one more line of context above, else below (the same line on both sides)
            i1, j1 = i1 - 1, j1 - 1
        else:
            i2, j2 = i2 + 1, j2 + 1


def chat_oracle_for(env):
    """The chat oracle of an env object (edit menu or tools)."""
    from bugfix_rl.gym.edit_menu import EditMenuEnv

    return EditMenuChatOracle() if isinstance(env, EditMenuEnv) else ToolsChatOracle()


def chat_scripted_episode(oracle, env, path, group: int = 0) -> Trajectory:
    """Roll a chat oracle (start(user message) -> first turn's text, then responses -> next turn's text)
    through `env` on the token path; its turns are policy tokens (log-prob 0)."""
    front_end = chat_front_end(env)
    user = front_end.user_message(env)
    transcript = Transcript(path.prompt_ids(front_end.system, user, front_end.tools))
    text = oracle.start(user)
    while True:
        ids = path.encode_turn(text) + [path.end_of_turn_id]
        transcript.add_sampled(ids, [0.0] * len(ids))
        responses = front_end.step(env, text)
        if env.done:
            break
        transcript.add_observation(path.observation_ids(responses))
        text = oracle(responses)
    return Trajectory(transcript.ids, transcript.policy_mask, transcript.sampler_logp, env.reward, group, env.info)
