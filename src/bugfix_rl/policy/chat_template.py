"""Token-in/token-out episodes over a chat template (Qwen3's), and the start-up check of that path.

An episode is one growing id sequence, never re-encoded:

    prompt      render([system, user], tools, add_generation_prompt, enable_thinking=False)
                -> ... <|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n
    turn        the sampled ids, as sampled, up to and including <|im_end|>      (policy tokens)
    observation \\n<|im_start|>user\\n<tool_response>\\n...\\n</tool_response>...<|im_end|>\\n
                <|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n                       (not policy tokens)

The observation ids are the template's own: `observation_ids` renders a conversation ending in the
turn's tool messages and the next generation prompt, and keeps the text after the assistant turn's
<|im_end|>. That cut sits right after a special token, so encoding the suffix alone gives the same
ids as encoding the whole rendering. A turn cut off by the token limit gets a forced <|im_end|>
first (not a policy token).

Qwen3's template drops an empty think block from earlier assistant turns when it re-renders a
history; the model, though, saw the block in each turn's generation prompt. So the conversation the
episode equals is the one whose earlier assistant messages carry the block in their content
(`reasoning_content=""` stops the template from parsing it away); `check_token_path` renders exactly
that and compares it with the incremental ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROLE_HEADER = "<|im_start|>assistant\n"
_TURN_MARK = "\u2063turn-3f9c\u2063"  # a string no tool response contains before the assistant's own


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


class ChatTokenPath:
    """The chat template's text <-> ids for one tokenizer (shared, never copied: deepcopy returns it)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
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

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def prompt_ids(self, system: str, user: str, tools: list[dict]) -> list[int]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self.encode(self.render(messages, tools, add_generation_prompt=True))

    def observation_ids(self, responses: list[str], closed: bool = True) -> list[int]:
        """Ids after a turn: [<|im_end|> if the turn was cut off] + the tool-response block + the next
        generation prompt, as the template renders them."""
        messages = [{"role": "user", "content": "u"},
                    {"role": "assistant", "content": _TURN_MARK, "reasoning_content": ""}]
        messages += [{"role": "tool", "content": text} for text in responses]
        rendered = self.render(messages, add_generation_prompt=True)
        _, cut, suffix = rendered.partition(_TURN_MARK + self.end_of_turn_text)
        if not cut:
            raise TokenPathMismatch("the chat template does not end an assistant turn with <|im_end|>")
        return ([] if closed else [self.end_of_turn_id]) + self.encode(suffix)

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
        added = sorted(self.tokenizer.get_added_vocab(), key=len, reverse=True)
        ids, index = [], 0
        while index < len(text):
            token = next((t for t in added if text.startswith(t, index)), None)
            piece = token or text[index]
            ids += self.encode(piece)
            index += len(piece)
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
    (3) the structural policy mask (`policy_mask`) marks exactly the sampled ids.
    `transcript_factory` is a parameter so a test can hand in a broken one."""
    for results in (1, 2):
        system, user, turns, final = _check_conversation(tools, results)
        transcript, _ = _episode(path, transcript_factory, system, user, tools, turns, final, path.encode)
        ids = transcript.ids
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        for text, responses in turns:
            messages.append({"role": "assistant", "content": path.turn_prefix + text, "reasoning_content": ""})
            messages += [{"role": "tool", "content": r} for r in responses]
        messages.append({"role": "assistant", "content": final})
        rendered = path.encode(path.render(messages, tools))
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
