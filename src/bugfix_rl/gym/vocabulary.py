"""The gym's words: every word an edit-menu episode over some tasks can contain (`gym_words`).

The TinyAgent tokenizer (policy/tokenizer.py) builds its vocabulary from these, plus, for the tools
env, `gym.tools.vocabulary.tools_vocabulary`; they live in the gym so that the gym never imports the
policy that reads it.
"""

from __future__ import annotations

from bugfix_rl.gym.edit_menu import RENAME_POOL, TOOLS
from bugfix_rl.gym.ops import NAME_PLACEHOLDER, code_states
from bugfix_rl.gym.tasks import ALL_OPS, OPERAND_POOL, Task

ENV_PHRASES = (
    "issue : returns wrong results",
    "error : malformed call",
    "error : edit budget used",
    "no change ok",
)


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
