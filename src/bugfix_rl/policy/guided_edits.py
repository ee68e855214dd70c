"""Guided decoding of the tools env's Edit call: old_string held to whole lines of the file as shown.

With `env.guide_old_string` the word sampler (rollout/sampler.py) lets a TinyAgent write, inside an
Edit's old_string, only tokens that keep it a run of whole lines of the file being edited as its latest
Read or Edit result listed it (line numbers left out, `<nl>` between lines), and `new` only once it
ends with a whole line, as the oracle's Edits do. Structured-output samplers constrain a tool call to
its grammar the same way. Nothing the agent has not been shown is offered: a file it has not read (or
has written since with Write) leaves the call unguided, as does every other call and every other part
of an Edit; a listing cut at the observation's cap keeps its whole lines only. The latest listing of a
file counts, as shown: one from a later line on holds old_string to those lines, and a file changed by
a Bash command keeps its last listing until it is read again. The line choice, where old_string stops,
new_string and when to answer stay the policy's own decisions.

The sampler records each guided position's allowed ids in the episode (`Trajectory.guided`); the
trainer renormalises over the same sets (`hold_to_allowed`, from `Batch.allowed`), so the log-probs it
trains are those of the distribution that sampled the tokens, token for token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bugfix_rl.gym.tools.render import CUT
from bugfix_rl.policy.tokenizer import EpisodeWords, Tokenizer


def hold_to_allowed(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """logits [..., V] with -inf outside each guided position's allowed ids.   allowed [..., K] long

    allowed lists a position's ids, right-padded with -1; a position whose first entry is -1 is not
    guided and keeps every logit. The same function masks the sampler's and the trainer's logits, so
    both log-softmaxes see the same floats."""
    V = logits.shape[-1]
    keep = torch.zeros(*allowed.shape[:-1], V + 1, dtype=torch.bool, device=logits.device)
    keep.scatter_(-1, torch.where(allowed >= 0, allowed, V), True)  # the padding lands in the spare column
    keep = keep[..., :V] | (allowed[..., :1] < 0)  # unguided positions keep everything
    return logits.masked_fill(~keep, float("-inf"))


def allowed_tensor(sets: list[tuple[int, ...] | None]) -> torch.Tensor:
    """[len(sets), K] long: each set's ids, right-padded with -1 (a None set: all -1, not guided)."""
    width = max((len(s) for s in sets if s), default=1)
    return torch.tensor([list(s or ()) + [-1] * (width - len(s or ())) for s in sets], dtype=torch.long)


@dataclass(frozen=True)
class GuideWords:
    """The ids the guide reads: the Edit call's words, the call separator, the line break, the ends of an
    action and an observation, and the tools that answer with a listing of their file."""

    edit: int
    old: int
    new: int
    separator: int
    newline: int
    end_of_action: int
    end_of_observation: int
    listing_tools: frozenset[int]
    write: int
    cut: int | None  # the word that ends an observation cut at its cap (gym/tools/render.CUT)

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> "GuideWords":
        ids = tokenizer._ids
        missing = [w for w in ("Edit", "Read", "Write", "old", "new", ";", "<nl>") if w not in ids]
        if missing:
            raise ValueError(f"env.guide_old_string needs the tools vocabulary (no {', '.join(missing)} in this one)")
        return cls(ids["Edit"], ids["old"], ids["new"], ids[";"], ids["<nl>"], tokenizer.end_of_action_id,
                   tokenizer.end_of_observation_id, frozenset(ids[w] for w in ("Read", "Edit", "Write")),
                   ids["Write"], ids.get(CUT))


class OldStringGuide:
    """One episode's guide. `feed(ids)` reads the episode's context as it grows (the tokens not read yet);
    `allowed()` gives the ids allowed next, or None where the next token is not guided."""

    def __init__(self, words: GuideWords, vocabulary: EpisodeWords):
        self.words, self.vocabulary = words, vocabulary
        self.listings: dict[int, list[int]] = {}  # path id -> the file's latest listing, numbers left out
        self.calls: list[list[int]] = [[]]  # the current (or last) action's calls, split at `;`
        self.observation: list[int] = []
        self.in_action = False
        self.seen = 0  # context tokens read so far

    def feed(self, ids: list[int]) -> None:
        words = self.words
        for token in ids[self.seen:]:
            if token == words.end_of_observation:
                self._read_observation()
                self.observation, self.calls, self.in_action = [], [[]], True
            elif token == words.end_of_action:
                self.in_action = False
            elif self.in_action:  # (an action cut at its length limit runs into the observation: unpaired)
                if token == words.separator:
                    self.calls.append([])
                else:
                    self.calls[-1].append(token)
            else:
                self.observation.append(token)
        self.seen = len(ids)

    def _read_observation(self) -> None:
        """Pair the observation's results (split at `;`) with the action's calls; a Read, Edit or Write
        whose result is a numbered listing updates its file's listing (whole lines only: a cut one loses
        its last, partial line), and a Write that shows none drops it."""
        results, current = [], []
        for token in self.observation:
            if token == self.words.separator:
                results.append(current)
                current = []
            else:
                current.append(token)
        results.append(current)
        newline, listing_tools = self.words.newline, self.words.listing_tools
        calls = self.calls
        if len(results) != len(calls):  # a program's output held a `;`: the results after the first other
            # call may be shifted, so only the listing calls before it are paired
            other = (i for i, call in enumerate(calls) if not call or call[0] not in listing_tools)
            calls = calls[:next(other, len(calls))]
        for call, result in zip(calls, results):
            if len(call) < 2 or call[0] not in listing_tools:
                continue
            if not (result and self._is_number(result[0])):
                if call[0] == self.words.write:
                    self.listings.pop(call[1], None)
                continue
            if self.words.cut is not None and result[-1] == self.words.cut:
                last_break = max((j for j, t in enumerate(result) if t == newline), default=0)
                result = result[:last_break]  # the partial line goes with the cut
            self.listings[call[1]] = [t for j, t in enumerate(result) if not (j == 0 or result[j - 1] == newline)]

    def _is_number(self, token: int) -> bool:
        return self.vocabulary.tokenizer.word(token, self.vocabulary.oov_words).isdigit()

    def allowed(self) -> tuple[int, ...] | None:
        """The ids that keep the Edit's old_string a run of whole lines from a line's start, plus `new` once
        it holds whole lines; None outside an old_string, for a file not listed yet, or once old_string
        has left the file (only when the guide was not followed)."""
        words, call = self.words, self.calls[-1]
        if not self.in_action or len(call) < 3 or call[0] != words.edit or call[2] != words.old:
            return None
        if words.new in call[3:]:  # new_string: not guided
            return None
        text = self.listings.get(call[1])
        if not text:
            return None
        prefix = call[3:]
        n = len(prefix)
        starts = [i for i in range(len(text) - n + 1)
                  if (i == 0 or text[i - 1] == words.newline) and text[i:i + n] == prefix]
        if not starts:
            return None
        following = {text[i + n] for i in starts if i + n < len(text)}
        if n and any(i + n == len(text) or text[i + n] == words.newline for i in starts):
            following.add(words.new)
        return tuple(sorted(following))


def replay_guide(ids: list[int], policy_mask: list[bool], tokenizer: Tokenizer,
                 oov_words: tuple[str, ...] = ()) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(position, allowed ids) of each policy token the guide would have guided, for an episode played
    without it (a scripted one: the probes score the oracle's episode as a guided policy would): what
    the sampler records as Trajectory.guided when it samples the same tokens."""
    vocabulary = EpisodeWords(tokenizer)
    vocabulary.oov_words = list(oov_words)  # the guide reads a slot's word (line numbers), not its encoding
    guide, guided = OldStringGuide(GuideWords.of(tokenizer), vocabulary), []
    for position in range(1, len(ids)):
        if policy_mask[position]:
            guide.feed(ids[:position])
            allowed = guide.allowed()
            if allowed:
                guided.append((position, allowed))
    return tuple(guided)


def episode_guide(env, tokenizer: Tokenizer, vocabulary: EpisodeWords) -> OldStringGuide | None:
    """The guide for one episode when its env asks for one (`env.guide_old_string`), else None."""
    if not getattr(env, "guide_old_string", False):
        return None
    return OldStringGuide(GuideWords.of(tokenizer), vocabulary)
