"""Token-in/token-out episodes over a chat template (Qwen3's), and the start-up check of that path.

An episode is one growing id sequence, never re-encoded:

    prompt      render([system, user], tools, add_generation_prompt, enable_thinking=False)
                -> ... <|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n
    turn        the sampled ids, as sampled, up to and including <|im_end|>      (policy tokens)
    observation \\n<|im_start|>user\\n<tool_response>\\n...\\n</tool_response>...<|im_end|>\\n
                <|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n                       (not policy tokens)

Control tokens come only from the template. The tokenizer's control tokens are its special added
tokens plus Qwen3's other added ones (<tool_call>, <think>, <tool_response>, <|fim_prefix|>, ...: added
but not special in Qwen3's tokenizer, so `split_special_tokens` would still parse them). A conversation
is rendered with a placeholder for each message's content; the template's own text around the
placeholders is structure (every control token's text is that token), and the contents go back in as
text: a system, user or tool message's content is plain (a tool printing `<|im_end|>` gives the ids of
the characters), an assistant's keeps only its own markers (`ASSISTANT_MARKERS`, the tokens the model
samples to think and to call tools). Plain text is encoded by a copy of the tokenizer without the
control tokens, on the whole run between two structural control tokens, so text without control
tokens gets exactly the tokenizer's own ids (the start-up check compares them). Placeholders also keep
content from steering the template (its `startswith('<tool_response>')` and `</think>` tests).

The observation ids are the template's own: `observation_ids` renders a conversation ending in the
turn's tool messages and the next generation prompt, and keeps what follows the assistant turn's
<|im_end|>. That cut sits right after a control token, so encoding the suffix alone gives the same ids
as encoding the whole rendering. A turn cut off by the token limit gets a forced <|im_end|> first (not
a policy token).

Qwen3's template drops an empty think block from earlier assistant turns when it re-renders a
history; the model, though, saw the block in each turn's generation prompt. So the conversation the
episode equals is the one whose earlier assistant messages carry the block in their content
(`reasoning_content=""` stops the template from parsing it away); `check_token_path` renders exactly
that and compares it with the incremental ids.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from bugfix_rl.policy.qwen3_template import QWEN3_ADDED_TOKENS

ROLE_HEADER = "<|im_start|>assistant\n"
# What the model writes itself in a turn: a think block and tool calls (the rest is text).
ASSISTANT_MARKERS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
_SLOT = "\u2063slot-3f9c-{}\u2063"  # stands for message i's content while the template renders
_SLOTS = re.compile("\u2063slot-3f9c-(\\d+)\u2063")


class TokenPathMismatch(RuntimeError):
    """The incremental episode ids differ from the chat template's rendering (one-line message)."""


@dataclass
class Transcript:
    """One episode's ids as they grow: ids [T], policy_mask [T] (True on sampled ids), sampler_logp [T]."""

    ids: list[int]
    policy_mask: list[bool] = field(default_factory=list)
    sampler_logp: list[float] = field(default_factory=list)

    def __post_init__(self):
        self.policy_mask = self.policy_mask or [False] * len(self.ids)
        self.sampler_logp = self.sampler_logp or [0.0] * len(self.ids)

    def add_sampled(self, ids: list[int], logps: list[float]) -> None:
        self.ids.extend(ids)
        self.policy_mask.extend([True] * len(ids))
        self.sampler_logp.extend(logps)

    def add_observation(self, ids: list[int]) -> None:
        self.ids.extend(ids)
        self.policy_mask.extend([False] * len(ids))
        self.sampler_logp.extend([0.0] * len(ids))


def _alternation(tokens) -> re.Pattern | None:
    """Leftmost-longest matching of the tokens' texts, as the tokenizer matches added tokens."""
    tokens = sorted(tokens, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, tokens))) if tokens else None


def _plain_tokenizer(tokenizer, control: set[str]):
    """(the fast tokenizer's backend without the control tokens, {its id: the tokenizer's id} for the
    other added tokens, which loading renumbers; the model's own vocabulary keeps its ids)."""
    from tokenizers import Tokenizer

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TokenPathMismatch("the chat token path needs a fast (tokenizers-backed) tokenizer")
    spec = json.loads(backend.to_str())
    spec["added_tokens"] = [token for token in spec["added_tokens"] if token["content"] not in control]
    plain = Tokenizer.from_str(json.dumps(spec))
    plain.no_truncation()
    plain.no_padding()
    return plain, {plain.token_to_id(token["content"]): token["id"] for token in spec["added_tokens"]}


class ChatTokenPath:
    """The chat template's text <-> ids for one tokenizer (shared, never copied: deepcopy returns it)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.control_ids = {token.content: i for i, token in tokenizer.added_tokens_decoder.items()
                            if token.special or token.content in QWEN3_ADDED_TOKENS}
        self._plain, self._plain_to_ids = _plain_tokenizer(tokenizer, set(self.control_ids))
        self._template_markers = _alternation(self.control_ids)
        self._turn_markers = _alternation(t for t in ASSISTANT_MARKERS if t in self.control_ids)
        self.end_of_turn_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.end_of_turn_text = "<|im_end|>"
        probe = [{"role": "user", "content": "x"}]
        opened = self.render(probe, add_generation_prompt=True)
        closed = self.render(probe, add_generation_prompt=False)
        if not opened.startswith(closed) or not opened[len(closed):].startswith(ROLE_HEADER):
            raise TokenPathMismatch("the chat template's generation prompt does not start with "
                                    f"{ROLE_HEADER!r}; only Qwen3-style (ChatML) templates are supported")
        self.generation_prompt_text = opened[len(closed):]  # <|im_start|>assistant\n<think>\n\n</think>\n\n
        self.generation_prompt_ids = self.encode(self.generation_prompt_text)
        self.turn_prefix = self.generation_prompt_text[len(ROLE_HEADER):]  # the empty think block

    def __deepcopy__(self, memo):
        return self

    def render(self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt, enable_thinking=False)

    # ------------------------------------------------ text -> ids, by who wrote the text

    def _segments(self, text: str, markers: re.Pattern | None) -> list[str | int]:
        """text as runs of plain text and the control ids of the markers found in it."""
        segments, position = [], 0
        for match in markers.finditer(text) if markers else ():
            segments += [text[position:match.start()], self.control_ids[match.group()]]
            position = match.end()
        return segments + [text[position:]]

    def _encode_segments(self, segments: list[str | int]) -> list[int]:
        """Each whole run of plain text between two control ids encoded at once (as the tokenizer would)."""
        ids, run = [], ""
        for segment in segments + [None]:
            if isinstance(segment, str):
                run += segment
                continue
            if run:
                ids += [self._plain_to_ids.get(i, i) for i in self._plain.encode(run, add_special_tokens=False).ids]
            ids += [] if segment is None else [segment]
            run = ""
        return ids

    def encode(self, text: str) -> list[int]:
        """Text as the tokenizer reads it, each control token's text that token: for the template's own
        text only (contents go through `encode_plain` or `encode_turn`)."""
        return self._encode_segments(self._segments(text, self._template_markers))

    def encode_turn(self, text: str) -> list[int]:
        """An assistant turn's text written for the model (a demonstration): its own markers
        (ASSISTANT_MARKERS) are tokens, any other control token's text is plain text."""
        return self._encode_segments(self._segments(text, self._turn_markers))

    def encode_plain(self, text: str) -> list[int]:
        """Text no control token may come from (a tool's output, a task's text)."""
        return self._encode_segments([text])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _parts(self, messages: list[dict], tools: list[dict] | None,
               add_generation_prompt: bool) -> list[tuple[int | None, re.Pattern | None, str]]:
        """The rendering as (message index, or None for the template's own text; its markers; text) parts."""
        slotted = [dict(m, content=_SLOT.format(i)) if isinstance(m.get("content"), str) else m
                   for i, m in enumerate(messages)]
        parts = []
        for k, piece in enumerate(_SLOTS.split(self.render(slotted, tools, add_generation_prompt))):
            if k % 2 == 0:
                parts.append((None, self._template_markers, piece))
            else:
                message = messages[int(piece)]
                markers = self._turn_markers if message["role"] == "assistant" else None
                parts.append((int(piece), markers, message["content"]))
        return parts

    def _encode_parts(self, parts) -> list[int]:
        return self._encode_segments([s for _, markers, text in parts for s in self._segments(text, markers)])

    def encode_conversation(self, messages: list[dict], tools: list[dict] | None = None,
                            add_generation_prompt: bool = False) -> list[int]:
        """The template's rendering of `messages`, control tokens from the template only."""
        return self._encode_parts(self._parts(messages, tools, add_generation_prompt))

    def prompt_ids(self, system: str, user: str, tools: list[dict]) -> list[int]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self.encode_conversation(messages, tools, add_generation_prompt=True)

    def observation_ids(self, responses: list[str], closed: bool = True) -> list[int]:
        """Ids after a turn: [<|im_end|> if the turn was cut off] + the tool-response block + the next
        generation prompt, as the template renders them."""
        messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "", "reasoning_content": ""}]
        messages += [{"role": "tool", "content": text} for text in responses]
        parts = self._parts(messages, None, add_generation_prompt=True)
        turn = next((k for k, (index, _, _) in enumerate(parts) if index == 1), len(parts))
        after = parts[turn + 1][2] if turn + 1 < len(parts) else ""
        if not after.startswith(self.end_of_turn_text):
            raise TokenPathMismatch("the chat template does not end an assistant turn with <|im_end|>")
        suffix = [(None, self._template_markers, after[len(self.end_of_turn_text):])] + parts[turn + 2:]
        return ([] if closed else [self.end_of_turn_id]) + self._encode_parts(suffix)

    def policy_mask(self, ids: list[int], max_new_tokens: int) -> list[bool]:
        """Which ids the policy produced, from the token structure alone: after each generation prompt,
        the ids up to and including <|im_end|>, or max_new_tokens of them."""
        prompt, mask, in_turn, count = self.generation_prompt_ids, [], False, 0
        for index, token in enumerate(ids):
            if in_turn:
                mask.append(True)
                count += 1
                in_turn = not (token == self.end_of_turn_id or count == max_new_tokens)
            else:
                mask.append(False)
                if index + 1 >= len(prompt) and ids[index + 1 - len(prompt): index + 1] == prompt:
                    in_turn, count = True, 0
        return mask

    def split_ids(self, text: str) -> list[int]:
        """A deliberately non-canonical encoding of `text` (one piece per character; added tokens kept
        whole), as a model may sample it; it decodes back to `text`."""
        added = self.tokenizer.get_added_vocab()
        tokens = sorted(added, key=len, reverse=True)
        ids, index = [], 0
        while index < len(text):
            token = next((t for t in tokens if text.startswith(t, index)), None)
            ids += [added[token]] if token else self.encode_plain(text[index])
            index += len(token or text[index])
        return ids


# ---------------------------------------------------------------- the start-up check

_SAMPLE_RESPONSES = ("     1\tdef alpha(load, cap):\n     2\t    return load < cap",
                     "Error: String to replace not found in file.",
                     "fail ( 2 , 2 ) -> False want True / pass ( 9 , 7 )")


def _check_conversation(tools: list[dict], results_per_turn: int) -> tuple[str, str, list[tuple[str, list[str]]], str]:
    """(system, user, [(assistant text, tool responses)], final answer) with results_per_turn calls a turn."""
    call = '<tool_call>\n{"name": "%s", "arguments": {}}\n</tool_call>'
    names = [tool["function"]["name"] for tool in tools] or ["tool"]
    turns = []
    for turn in range(2):
        text = "\n".join(call % names[(turn + k) % len(names)] for k in range(results_per_turn))
        responses = [_SAMPLE_RESPONSES[(turn + k) % len(_SAMPLE_RESPONSES)] for k in range(results_per_turn)]
        turns.append((("Let me look.\n" if turn else "") + text, responses))
    return "You fix bugs.", "The function `alpha` in /repo/alpha.py returns wrong results.", turns, "Done: it is fixed."


def _episode(path: ChatTokenPath, transcript_factory, system, user, tools, turns, final, encode):
    """(the transcript built through `transcript_factory`, the ids it must hold by plain concatenation)."""
    prompt = path.prompt_ids(system, user, tools)
    transcript, expected = transcript_factory(list(prompt)), list(prompt)
    for text, responses in turns:
        sampled = encode(text) + [path.end_of_turn_id]
        observation = path.observation_ids(responses)
        transcript.add_sampled(sampled, [0.0] * len(sampled))
        transcript.add_observation(observation)
        expected += sampled + observation
    sampled = encode(final) + [path.end_of_turn_id]
    transcript.add_sampled(sampled, [0.0] * len(sampled))
    return transcript, expected + sampled


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def check_token_path(path: ChatTokenPath, tools: list[dict], transcript_factory=Transcript) -> None:
    """Raise TokenPathMismatch unless, with one and with two tool results per turn,
    (1) the incremental ids (prompt, turns encoded canonically, observation ids) equal the template's
        rendering of the same whole conversation, token for token;
    (2) with turns encoded non-canonically (`split_ids`, as a model may sample them) the episode holds
        the sampled ids exactly as sampled: a path that decodes and re-encodes them fails here;
    (3) the structural policy mask (`policy_mask`) marks exactly the sampled ids;
    and (4) template and contents encoded apart give the tokenizer's own ids for the whole rendering
    (these contents print no control token), while a tool response that prints every control token
    gives none of them (its observation holds the control ids of a plain one).
    `transcript_factory` is a parameter so a test can hand in a broken one."""
    for results in (1, 2):
        system, user, turns, final = _check_conversation(tools, results)
        transcript, _ = _episode(path, transcript_factory, system, user, tools, turns, final, path.encode_turn)
        ids = transcript.ids
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        for text, responses in turns:
            messages.append({"role": "assistant", "content": path.turn_prefix + text, "reasoning_content": ""})
            messages += [{"role": "tool", "content": r} for r in responses]
        messages.append({"role": "assistant", "content": final})
        rendered = path.encode_conversation(messages, tools)
        if rendered[: len(ids)] != ids or path.decode(rendered[len(ids):]) != "\n":
            at = _first_difference(ids, rendered)
            raise TokenPathMismatch(
                f"token path != chat template ({results} tool result(s) per turn) at token {at}: "
                f"ours {path.decode(ids[at:at + 8])!r} vs template {path.decode(rendered[at:at + 8])!r}")
        transcript, expected = _episode(path, transcript_factory, system, user, tools, turns, final, path.split_ids)
        if transcript.ids != expected:
            at = _first_difference(transcript.ids, expected)
            raise TokenPathMismatch(
                f"sampled ids were not kept as sampled ({results} tool result(s) per turn): at token {at} the "
                f"episode holds {transcript.ids[at:at + 6]} where the sampler drew {expected[at:at + 6]} "
                "(decoded and re-encoded?)")
        if path.policy_mask(expected, max_new_tokens=len(expected)) != transcript.policy_mask:
            raise TokenPathMismatch(f"the structural policy mask differs from the sampled positions "
                                    f"({results} tool result(s) per turn)")
        own = path.tokenizer.encode(path.render(messages, tools), add_special_tokens=False)
        if own != rendered:
            at = _first_difference(own, rendered)
            raise TokenPathMismatch(
                f"template and contents encoded apart != the tokenizer's encoding of the rendering at token {at}: "
                f"ours {path.decode(rendered[at:at + 8])!r} vs tokenizer {path.decode(own[at:at + 8])!r}")
    controls = set(path.control_ids.values())
    printed, plain = path.observation_ids([" ".join(path.control_ids)]), path.observation_ids(["x"])
    if [i for i in printed if i in controls] != [i for i in plain if i in controls]:
        raise TokenPathMismatch("a tool response that prints control tokens gives control ids")
