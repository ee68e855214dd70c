"""The tools base's scripted agent breaking its right Edit first (policy.tools_base.p_syntax_slip)."""

import ast
import random

import pytest

from bugfix_rl.gym.agents.scripted_tools import NoisyToolsPolicy, edit_words
from bugfix_rl.gym.ops import apply_op
from bugfix_rl.gym.tasks import ALL_TASKS, task_by_name
from bugfix_rl.gym.tools.code_words import words_to_code
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from bugfix_rl.rollout.sampler import scripted_episode
from sandboxes import start_sandbox
from test_fix_after_fail import MIXED, PINNED, book_episodes

GUARD = task_by_name("zero/average")  # the fix puts a two-line guard above the body
RIGHT = dict(p_read=1.0, p_right_after_read=1.0, p_miscopy=0.0, p_test=1.0, p_wander=0.0, p_malformed=0.0)


@pytest.fixture(scope="module")
def sandbox():
    with start_sandbox(workers=1) as box:
        yield box


def test_a_slipped_edit_is_refused_and_the_right_one_follows(sandbox, tools_tokenizer):
    """At 1 the right Edit comes first broken; the env that checks Edits' syntax refuses it, the file is
    unchanged, and the next turn's Edit (the right one, tests in its turn) solves the task; at 0 the
    right Edit comes at once."""
    for seed in range(12):
        env = ToolsEnv(GUARD, ToolsEnvConfig(check_edit_syntax=True), "pin", sandbox)
        policy = NoisyToolsPolicy(random.Random(seed), [ALL_TASKS[-1]], **RIGHT, p_syntax_slip=1.0)
        scripted_episode(policy, env, tools_tokenizer)
        assert env.info.actions == ["Read", "Edit:syntax_error", "Edit", "Bash", "answer"], seed
        assert env.info.hidden_pass and env.info.failed == {"syntax_error": 1}
    no_slip = ToolsEnv(GUARD, ToolsEnvConfig(check_edit_syntax=True), "pin", sandbox)
    scripted_episode(NoisyToolsPolicy(random.Random(0), [ALL_TASKS[-1]], **RIGHT), no_slip, tools_tokenizer)
    assert no_slip.info.actions == ["Read", "Edit", "Bash", "answer"] and no_slip.info.hidden_pass


def test_each_kind_of_slip_breaks_the_file():
    """The guard's body one level short, its last line twice, its last word left out: each is drawn by
    some seed, and each leaves a file Python refuses."""
    source = GUARD.source
    fixed = apply_op(GUARD, source, GUARD.fix_op)
    right = edit_words("pin.py", source, fixed)
    split = right.index("new")
    seen = set()
    for seed in range(40):
        policy = NoisyToolsPolicy(random.Random(seed), [], p_syntax_slip=1.0)
        policy.file, policy.right = "pin.py", fixed  # as after reading the file and choosing the right fix
        slipped = policy._syntax_slip(right, source)
        assert slipped is not None and slipped[:split + 1] == right[:split + 1]
        broken = source.replace(words_to_code(right[3:split]), words_to_code(slipped[split + 1:]), 1)
        with pytest.raises(SyntaxError):
            ast.parse(broken)
        seen.add(tuple(slipped))
    assert len(seen) == 3


def test_at_0_the_episodes_are_those_pinned_before_the_knob(sandbox, tools_tokenizer):
    """The digest and next draw pinned for the agent before p_fix_after_fail (test_fix_after_fail.py) hold
    with both knobs at 0: the default bases' demonstrations are unchanged."""
    assert book_episodes(sandbox, tools_tokenizer, **MIXED, p_syntax_slip=0.0) == PINNED
