"""Word-level tokenizer over everything the gym can show or the agent can say, open to any other word.

The vocabulary is built from the tasks (every code state's rendering and test report, for every op),
the env's fixed phrases, the rename pool and the call words: the gym's words (gym/vocabulary.py), and
for the tools env its own (gym/tools/vocabulary.py) as `extra_words`. Ids are stable for a given task
set: words are sorted after the special tokens.

A word outside it (a name, a constant, a string of a task the vocabulary was not built from) takes
one of `oov_slots` per-episode slot ids, which follow the words: the first new word an episode shows
is `<oov0>`, the next `<oov1>`, and each keeps its slot for the rest of the episode, as the extended
vocabulary of a pointer-generator network does (See et al., 2017). The slot ids carry no meaning of
their own: TinyAgent gives them no vocabulary probability, so the agent writes one back only by
copying it from the context (policy/copy_head.py), and `EpisodeWords` decodes it to the episode's
word. With as many slots as the context has positions, an episode that fits never runs out of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from bugfix_rl.config import PolicyConfig
from bugfix_rl.gym.tasks import ALL_TASKS, OPERAND_POOL, Task, operand_names
from bugfix_rl.gym.vocabulary import gym_words

PAD, BOS, END_OF_ACTION, END_OF_OBSERVATION = "<pad>", "<bos>", "<eoa>", "<eoo>"
SPECIALS = (PAD, BOS, END_OF_ACTION, END_OF_OBSERVATION)
OOV_SLOTS = PolicyConfig.max_len  # slots per episode: one per context position


class OutOfSlots(ValueError):
    """An episode showed more distinct out-of-vocabulary words than the tokenizer has slots (more than
    its context has positions, when the slots are as many: such an episode cannot fit anyway)."""


@dataclass(frozen=True)
class Tokenizer:
    """words[i] is the word of id i; ids 0-3 are <pad>, <bos>, <eoa>, <eoo>; ids len(words) ..
    vocab_size - 1 are the per-episode out-of-vocabulary slots (module doc)."""

    words: tuple[str, ...]
    oov_slots: int = 0

    def __post_init__(self):
        object.__setattr__(self, "_ids", {w: i for i, w in enumerate(self.words)})

    @property
    def vocab_size(self) -> int:
        """Ids a model reads and writes: the words, then the slots."""
        return len(self.words) + self.oov_slots

    @property
    def pad_id(self) -> int:
        return 0

    @property
    def bos_id(self) -> int:
        return 1

    @property
    def end_of_action_id(self) -> int:
        return 2

    @property
    def end_of_observation_id(self) -> int:
        return 3

    def episode(self) -> EpisodeWords:
        """A fresh encoder/decoder for one episode (its slots start empty)."""
        return EpisodeWords(self)

    def encode(self, text: str) -> list[int]:
        """One text on its own: its new words take slots in order of first appearance. An episode's
        texts must share one `episode()`, so that a word keeps its slot across them."""
        return self.episode().encode(text)

    def decode(self, ids, oov_words: tuple[str, ...] | list[str] = ()) -> str:
        """Words of ids, slot k read as oov_words[k] (an episode's, e.g. Trajectory.oov_words)."""
        return " ".join(self.word(i, oov_words) for i in ids)

    def word(self, token: int, oov_words: tuple[str, ...] | list[str] = ()) -> str:
        """The word of one id; a slot is oov_words[k], or `<oovk>` when the episode gave it no word."""
        token = int(token)
        if token < len(self.words):
            return self.words[token]
        slot = token - len(self.words)
        if not 0 <= slot < self.oov_slots:
            raise ValueError(f"id {token} is outside the vocabulary ({self.vocab_size} ids)")
        return oov_words[slot] if slot < len(oov_words) else f"<oov{slot}>"


class EpisodeWords:
    """One episode's encoder and decoder: a word outside the vocabulary takes the next free slot the
    first time the episode shows it (oov_words[k] is the word of slot k) and keeps it, so the agent's
    copy of it decodes to the same word."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.oov_words: list[str] = []
        self._slots: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        """Ids of the words of text (split on whitespace). Raises OutOfSlots past the last slot."""
        fixed, slots, ids = self.tokenizer._ids, self._slots, []
        for word in text.split():
            token = fixed.get(word)
            if token is None:
                token = slots.get(word)
            if token is None:
                if len(self.oov_words) >= self.tokenizer.oov_slots:
                    raise OutOfSlots(f"more than {self.tokenizer.oov_slots} words outside the vocabulary in one "
                                     f"episode (the next: {word[:40]!r})")
                token = slots[word] = len(self.tokenizer.words) + len(self.oov_words)
                self.oov_words.append(word)
            ids.append(token)
        return ids

    def words_of(self, ids) -> list[str]:
        return [self.tokenizer.word(i, self.oov_words) for i in ids]

    def decode(self, ids) -> str:
        return " ".join(self.words_of(ids))


def build_tokenizer(tasks: list[Task], extra_words: set[str] = frozenset(), oov_slots: int = OOV_SLOTS) -> Tokenizer:
    """The words of `tasks` (gym_words) and extra_words, sorted after the specials, then oov_slots
    slots (build_tokenizer_for gives as many as policy.max_len)."""
    words = sorted((gym_words(tasks) | set(extra_words)) - set(SPECIALS))
    return Tokenizer(SPECIALS + tuple(words), oov_slots)


def identifier_ids(tokenizer: Tokenizer) -> list[int]:
    """Vocabulary ids of operand names: every task's parameters and locals and the rename pool.

    Used by TinyAgent's shared_identifier_embedding: a lexical class (like "this word is a variable
    name"), computed from every task's source, so a held-out name enters the network like any other."""
    names = set(OPERAND_POOL)
    for task in ALL_TASKS:
        names.update(operand_names(task))
    return sorted(tokenizer._ids[w] for w in names if w in tokenizer._ids)


def edit_marker_ids(tokenizer: Tokenizer) -> tuple[int, int, list[int]]:
    """(id of `old`, id of `new`, ids of the tokens that end a tool call: `;`, end of action, end of
    observation): what TinyAgent's copy_edit_align, copy_edit_resume and copy_lookup read (policy/copy_head.py)."""
    missing = [w for w in ("old", "new", ";") if w not in tokenizer._ids]
    if missing:
        raise ValueError(f"copy_edit_align / copy_edit_resume / copy_lookup need the tools vocabulary "
                         f"(no {', '.join(missing)} in this one)")
    ends = [tokenizer._ids[w] for w in (";", END_OF_ACTION, END_OF_OBSERVATION)]
    return tokenizer._ids["old"], tokenizer._ids["new"], ends
