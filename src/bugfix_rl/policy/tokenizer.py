"""Word-level tokenizer over everything the gym can show or the agent can say.

The vocabulary is built from the tasks (every code state's rendering and test report, for every op),
the env's fixed phrases, the rename pool and the call words, so an episode never meets an unknown
word. Ids are stable for a given task set: words are sorted after the special tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from bugfix_rl.gym.edit_menu import RENAME_POOL, TOOLS
from bugfix_rl.gym.ops import NAME_PLACEHOLDER, code_states
from bugfix_rl.gym.tasks import ALL_OPS, ALL_TASKS, OPERAND_POOL, Task, operand_names

PAD, BOS, END_OF_ACTION, END_OF_OBSERVATION = "<pad>", "<bos>", "<eoa>", "<eoo>"
SPECIALS = (PAD, BOS, END_OF_ACTION, END_OF_OBSERVATION)
ENV_PHRASES = (
    "issue : returns wrong results",
    "error : malformed call",
    "error : edit budget used",
    "no change ok",
)


@dataclass(frozen=True)
class Tokenizer:
    """words[i] is the word of id i; ids 0-3 are <pad>, <bos>, <eoa>, <eoo>."""

    words: tuple[str, ...]

    def __post_init__(self):
        object.__setattr__(self, "_ids", {w: i for i, w in enumerate(self.words)})

    @property
    def vocab_size(self) -> int:
        return len(self.words)

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

    def encode(self, text: str) -> list[int]:
        try:
            return [self._ids[w] for w in text.split()]
        except KeyError as err:
            raise KeyError(f"word {err.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids) -> str:
        return " ".join(self.words[int(i)] for i in ids)


def gym_words(tasks: list[Task]) -> set[str]:
    """Every word an edit-menu episode over `tasks` can contain."""
    words = set(" ".join(ENV_PHRASES).split()) | set(TOOLS) | set(ALL_OPS) | set(RENAME_POOL) | set(OPERAND_POOL)
    for task in tasks:
        words.add(task.fn_name)
        for state in code_states(task).values():
            if state is not None:
                words.update(state.compact.split())
                words.update(state.test_report.split())
    words.discard(NAME_PLACEHOLDER)
    return words


def build_tokenizer(tasks: list[Task], extra_words: set[str] = frozenset()) -> Tokenizer:
    words = sorted((gym_words(tasks) | set(extra_words)) - set(SPECIALS))
    return Tokenizer(SPECIALS + tuple(words))


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
    observation): what TinyAgent's copy_edit_align and copy_edit_resume features read (policy/copy_head.py)."""
    missing = [w for w in ("old", "new", ";") if w not in tokenizer._ids]
    if missing:
        raise ValueError(f"copy_edit_align / copy_edit_resume need the tools vocabulary (no {', '.join(missing)} in this one)")
    ends = [tokenizer._ids[w] for w in (";", END_OF_ACTION, END_OF_OBSERVATION)]
    return tokenizer._ids["old"], tokenizer._ids["new"], ends
