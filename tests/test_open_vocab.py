"""An open vocabulary for TinyAgent (issue 35): a task whose names, constants and strings occur nowhere
in the 30 tasks runs in both envs with no KeyError and no `?`, every observation survives the
tokenizer's round trip, and the agent's copies of new words (an Edit's old_string and new_string)
decode to the file's exact text."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bugfix_rl.gym import ops
from bugfix_rl.gym.agents.scripted import OraclePolicy
from bugfix_rl.gym.agents.scripted_tools import ToolsOraclePolicy
from bugfix_rl.gym.edit_menu import EditMenuConfig, EditMenuEnv
from bugfix_rl.gym.tasks import ALL_TASKS, Task
from bugfix_rl.gym.tools.calls import ToolCall
from bugfix_rl.gym.tools.code_words import (code_to_words_exact, escape_text, line_to_words_exact, unescape_word,
                                            words_to_code)
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from bugfix_rl.gym.tools.repo import renamed_source, source_file
from bugfix_rl.gym.tools.syntax_compact import parse_compact_turn
from bugfix_rl.policy.tiny import TinyAgent, TinyAgentConfig
from bugfix_rl.policy.tokenizer import OutOfSlots, Tokenizer, build_tokenizer
from bugfix_rl.rollout.sampler import sample_episodes, scripted_episode
from sandboxes import start_sandbox


def _task(name: str, source: str, reference, public, hidden) -> Task:
    fn_name = source.split("def ", 1)[1].split("(", 1)[0]
    cases = lambda inputs: tuple((args, reference(*args)) for args in inputs)  # noqa: E731
    return Task(name, fn_name, source.strip() + "\n", cases(public), cases(hidden), "heldout")


# A user's own tasks, in the gym's Task format: names, constants and strings found in none of the 30.
QUOTA = _task("zero/scaled_quota_oov", '''
def scaled_quota(widget, gizmo_count):
    """Widgets per gizmo, scaled by 7919.

    A "quota" of 'parts'; 0 when there is no gizmo.
    """
    return widget * 7919 // gizmo_count
''', lambda widget, gizmo_count: 0 if gizmo_count == 0 else widget * 7919 // gizmo_count,
    [(3, 2), (5, 0), (10, 7)], [(0, 0), (4, 0), (11, 3), (1, 1), (100, 9)])
CURFEW = _task("compare/is_late_oov", '''
def is_late(arrival_hhmm, curfew):
    """True when the "arrival" is at or after the curfew ('HH:MM' text)."""
    return arrival_hhmm > curfew
''', lambda arrival_hhmm, curfew: arrival_hhmm >= curfew,
    [("22:15", "22:00"), ("22:00", "22:00"), ("21:59", "22:00")],
    [("07:45", "07:45"), ("23:30", "22:00"), ("06:00", "22:00"), ("12:00", "12:00")])
NEW_WORDS = ("scaled_quota", "widget", "gizmo_count", "7919", "is_late", "arrival_hhmm", "curfew")
NAMES = (None, "nova")  # the task's own name, and the env's rename


@pytest.fixture(scope="module")
def menu_tokenizer():
    return build_tokenizer(list(ALL_TASKS))


@pytest.fixture(scope="module")
def sandbox():
    with start_sandbox(workers=2) as box:
        yield box


class Recorded:
    """An env whose every observation (the prompt included) is kept, to check what the tokenizer saw."""

    def __init__(self, env):
        self.env, self.observations = env, []

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self):
        self.observations.append(self.env.reset())
        return self.observations[-1]

    def step(self, words):
        self.observations.append(self.env.step(words))
        return self.observations[-1]


def check_episode(trajectory, env: Recorded, tokenizer: Tokenizer) -> None:
    """No `?`, every observation encoded exactly as its words, and every new word the agent wrote was
    shown first (a copy head can point at it)."""
    assert all(word not in tokenizer.words for word in trajectory.oov_words)
    text = tokenizer.decode(trajectory.ids, trajectory.oov_words)
    vocabulary = tokenizer.episode()
    for observation in env.observations:
        words = " ".join(observation.split())  # the edit menu shows a blank line as `/  /`: words are what count
        assert "?" not in observation.split() and words in text
        assert vocabulary.decode(vocabulary.encode(observation)) == words
    first = {}
    for position, (token, policy) in enumerate(zip(trajectory.ids, trajectory.policy_mask)):
        first.setdefault(token, (position, policy))
    written = {token for token, policy in zip(trajectory.ids, trajectory.policy_mask) if policy}
    assert all(not first[token][1] for token in written if token >= len(tokenizer.words))


def test_the_new_tasks_words_are_outside_both_vocabularies(menu_tokenizer, tools_tokenizer):
    for tokenizer in (menu_tokenizer, tools_tokenizer):
        assert not set(NEW_WORDS) & set(tokenizer.words)
        assert '"' not in menu_tokenizer.words
        assert tokenizer.vocab_size == len(tokenizer.words) + 256


@pytest.mark.parametrize("task", [QUOTA, CURFEW], ids=lambda task: task.name)
@pytest.mark.parametrize("name", NAMES)
def test_edit_menu_oracle_solves_a_task_of_new_words(menu_tokenizer, task, name):
    env = Recorded(EditMenuEnv(task, EditMenuConfig(), name))
    trajectory = scripted_episode(OraclePolicy(), env, menu_tokenizer)
    assert trajectory.reward == 1.0 and env.info.ops == [task.fix_op] and env.info.submitted
    check_episode(trajectory, env, menu_tokenizer)
    shown = set(trajectory.oov_words)
    assert {"widget", "7919", '"'} <= shown if task is QUOTA else {"arrival_hhmm", "curfew", "'"} <= shown


def oracle_edit(tokenizer, task, name):
    """The tools oracle's Read and Edit on `task` (no Bash, so no sandbox), through the tokenizer the
    way the sampler goes: observation text -> ids -> text, action words -> ids -> words."""
    env = Recorded(ToolsEnv(task, ToolsEnvConfig(), name))
    vocabulary, oracle = tokenizer.episode(), ToolsOraclePolicy()
    observation, actions = env.reset(), []
    for _ in range(2):
        observation = vocabulary.decode(vocabulary.encode(observation))
        words = oracle(observation)
        if words[-3:] == [";", "Bash", "pytest"]:
            words = words[:-3]
        action_ids = vocabulary.encode(" ".join(words))
        actions.append(action_ids)
        observation = env.step(vocabulary.words_of(action_ids))
    return env, vocabulary, actions


@pytest.mark.parametrize("task", [QUOTA, CURFEW], ids=lambda task: task.name)
@pytest.mark.parametrize("name", NAMES)
def test_a_tools_edit_copying_new_words_gives_the_exact_text(tools_tokenizer, task, name):
    env, vocabulary, (read, edit) = oracle_edit(tools_tokenizer, task, name)
    shown = env.shown_name
    source = renamed_source(task, shown)
    assert env.info.actions == ["Read", "Edit"] and env.info.ops == [task.fix_op]
    assert env.files[source_file(shown)] == getattr(ops, task.fix_op)(source)  # the docstring kept to the byte
    words = len(tools_tokenizer.words)
    copied = {token for token in edit if token >= words}
    shown_before = vocabulary.encode(" ".join(env.observations[:2]))  # the issue and the Read listing
    assert copied and all(token in shown_before for token in copied)
    for observation in env.observations:
        assert "?" not in observation.split()
        assert vocabulary.decode(vocabulary.encode(observation)) == observation
    old_words = vocabulary.words_of(edit)[3:vocabulary.words_of(edit).index("new")]
    assert words_to_code(old_words) in source


@pytest.mark.parametrize("task", [QUOTA, CURFEW], ids=lambda task: task.name)
@pytest.mark.parametrize("name", NAMES)
def test_tools_oracle_solves_a_task_of_new_words(sandbox, tools_tokenizer, task, name):
    env = Recorded(ToolsEnv(task, ToolsEnvConfig(), name, sandbox))
    trajectory = scripted_episode(ToolsOraclePolicy(), env, tools_tokenizer)
    assert trajectory.reward == 1.0, tools_tokenizer.decode(trajectory.ids, trajectory.oov_words)
    assert env.info.actions == ["Read", "Edit", "Bash", "answer"] and env.info.ops == [task.fix_op]
    assert env.info.hidden_pass and not env.info.exploit
    check_episode(trajectory, env, tools_tokenizer)


def test_the_thirty_tasks_need_no_slot(tools_tokenizer, menu_tokenizer):
    """Their episodes are the ids they were before slots existed: every word has its own id."""
    for task in ALL_TASKS:
        env = EditMenuEnv(task, EditMenuConfig(), "nova")
        assert scripted_episode(OraclePolicy(), env, menu_tokenizer).oov_words == ()
        env, vocabulary, _ = oracle_edit(tools_tokenizer, task, "nova")
        assert vocabulary.oov_words == [], task.name


def test_slots_follow_first_appearance_and_decode_with_the_episode():
    tokenizer = Tokenizer(("<pad>", "<bos>", "<eoa>", "<eoo>", "a"), oov_slots=3)
    vocabulary = tokenizer.episode()
    assert vocabulary.encode("a zz a yy") == [4, 5, 4, 6]
    assert vocabulary.encode("yy zz xx") == [6, 5, 7]  # the same word, the same slot, across texts
    assert vocabulary.decode([5, 6, 7]) == "zz yy xx" and tokenizer.decode([7, 5], ["p", "q", "r"]) == "r p"
    assert tokenizer.word(7) == "<oov2>"  # a slot the episode never gave a word
    with pytest.raises(OutOfSlots):
        vocabulary.encode("ww")
    with pytest.raises(ValueError):
        tokenizer.word(8)


def test_an_episode_out_of_slots_ends_as_a_full_context(menu_tokenizer):
    few = Tokenizer(menu_tokenizer.words, oov_slots=4)
    env = EditMenuEnv(QUOTA, EditMenuConfig(), "nova")
    trajectory = scripted_episode(OraclePolicy(), env, few)
    assert env.done and env.info.truncated and not env.info.submitted and trajectory.reward == 0.0
    assert len(trajectory.oov_words) == 4


def tiny(tokenizer: Tokenizer, copy_head: bool, shared: bool = False, max_len: int = 256) -> TinyAgent:
    torch.manual_seed(0)
    cfg = TinyAgentConfig(max_len=max_len, copy_head=copy_head, shared_identifier_embedding=shared)
    return TinyAgent(len(tokenizer.words), cfg, identifier_ids=[4] if shared else None,
                     oov_slots=tokenizer.oov_slots)


def test_slots_add_no_weights_and_leave_the_words_numbers_alone(menu_tokenizer):
    """The same init, tensors and word log-probs as a model without slots; slots get no vocabulary
    probability, so a model without a copy head never writes one."""
    with_slots = tiny(menu_tokenizer, copy_head=False)
    torch.manual_seed(0)
    without = TinyAgent(len(menu_tokenizer.words), TinyAgentConfig(max_len=256))
    assert with_slots.state_dict().keys() == without.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(with_slots.state_dict().values(), without.state_dict().values()))
    ids = torch.randint(0, len(menu_tokenizer.words), (3, 40), generator=torch.Generator().manual_seed(1))
    logits, plain = with_slots(ids), without(ids)
    words = len(menu_tokenizer.words)
    assert logits.shape[-1] == menu_tokenizer.vocab_size and torch.equal(logits[..., :words], plain)
    log_probs = torch.log_softmax(logits, -1)
    assert torch.equal(log_probs[..., :words], torch.log_softmax(plain, -1))
    assert torch.all(log_probs[..., words:].exp() == 0) and torch.isfinite(log_probs).all()


@pytest.mark.parametrize("shared", [False, True])
def test_the_copy_head_can_write_a_slot_it_sees(tools_tokenizer, shared):
    model = tiny(tools_tokenizer, copy_head=True, shared=shared).eval()
    vocabulary = tools_tokenizer.episode()
    ids = torch.tensor([[1] + vocabulary.encode("1 def scaled_quota ( widget , gizmo_count ) : Edit")])
    with torch.no_grad():
        log_p = model(ids)[0, -1]  # the next token's log P
    widget, gizmo = vocabulary.encode("widget gizmo_count")
    unseen = len(tools_tokenizer.words) + 5
    assert log_p[widget] > -20 and log_p[gizmo] > -20 and log_p[unseen] < -1000
    assert torch.isfinite(log_p).all() and torch.logsumexp(log_p, 0).abs() < 1e-4


def test_sampling_an_episode_of_new_words_with_the_copy_head(tools_tokenizer):
    """The sampler with TinyAgent's copy head on the new task (no sandbox: its Bash calls fail as env
    errors): every action is decoded with the episode's slots, nothing raises, nothing shows `?`."""
    model = tiny(tools_tokenizer, copy_head=True, shared=True, max_len=128).eval()
    envs = [Recorded(ToolsEnv(task, ToolsEnvConfig(max_turns=2), name)) for task in (QUOTA, CURFEW)
            for name in NAMES]
    trajectories = sample_episodes(model, tools_tokenizer, envs, [0, 0, 1, 1], 1.0, torch.Generator().manual_seed(0))
    for trajectory, env in zip(trajectories, envs):
        if env.shown_name == env.task.fn_name:  # the prompt's first word outside the vocabulary
            assert trajectory.oov_words[0] == env.shown_name
        text = tools_tokenizer.decode(trajectory.ids, trajectory.oov_words)
        assert "?" not in text.split() and "<oov" not in text
        for observation in env.observations:
            assert observation in text


TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=40)
CODE = st.lists(st.sampled_from(['x', ' ', '"', "'", '\\', 'rb', 'f', '#', '(', ')', '=', '%', '\t', '\u3000',
                                 '"""', "1", ":", ",", "  "]), max_size=14).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(TEXT, CODE))
def test_any_line_survives_the_exact_words(line):
    words = line_to_words_exact(line)
    assert words_to_code(words) == line
    assert all(word and not any(c.isspace() for c in word) for word in words)
    text = line + "\n" + line + "\n"  # a file: its last newline starts no line
    assert words_to_code(code_to_words_exact(text)) + "\n" == text


@given(TEXT)
def test_escaping_is_a_bijection(text):
    assert unescape_word(escape_text(text)) == text and len(escape_text(text).split()) <= 1


def test_string_literals_are_single_words():
    assert line_to_words_exact('    x = f"a b" + \'c\'[0]  ') == ["<indent>", 'x%20=%20f"a%20b"%20+%20\'c\'[0]%20%20']
    assert line_to_words_exact('    x = f"a b" + \'c\'[0]') == ["<indent>", "x", "=", 'f"a%20b"', "+", "'c'", "[", "0", "]"]
    assert line_to_words_exact('return "100%", r"\\"" == b""') == ["return", '"100%25"', ",", 'r"\\""', "==", 'b""']


def test_names_and_lines_that_are_call_syntax_can_be_copied():
    """A name `new` would end old_string, a `;` the call: exact words escape them (and layout words)."""
    before, after = "def merge(old, new):\n    a = 1; return old + new\n", "    a = 1; return new + old"
    old_words = code_to_words_exact(before.splitlines()[1])
    assert old_words == ["<indent>", "a", "=", "1", "%3B", "return", "old", "+", "%6Eew"]
    (call,) = parse_compact_turn(["Edit", "m.py", "old", *old_words, "new", *code_to_words_exact(after)])
    assert call == ToolCall("Edit", {"file_path": "m.py", "old_string": before.splitlines()[1], "new_string": after})
    assert line_to_words_exact("    <nl>") == ["<indent>", "%3Cnl>"] and words_to_code(["<indent>", "%3Cnl>"]) == "    <nl>"


def test_unclosed_quotes_cost_linear_time():
    """Each kind of quote is scanned to the line's end at most once (a model can write any line)."""
    import time

    for line in ['"\\' * 40_000, "'" + "\\'" * 40_000, '"""' + '"' * 80_000, "(" * 20_000 + '"' * 60_000]:
        start = time.process_time()  # CPU time: a busy machine does not stretch it
        assert words_to_code(line_to_words_exact(line)) == line
        assert time.process_time() - start < 2.0


def test_random_turns_on_new_words_never_raise(tools_tokenizer):
    """Random words, including the episode's own new ones, through the tools env and the tokenizer."""
    rng = random.Random(0)
    env = Recorded(ToolsEnv(QUOTA, ToolsEnvConfig(max_turns=50), "nova"))
    vocabulary = tools_tokenizer.episode()
    vocabulary.encode(env.reset())
    vocabulary.encode(env.step(["Read", "nova.py"]))
    pool = ["Read", "Edit", "Write", "nova.py", "old", "new", "content", ";", "<nl>", "<indent>"] + vocabulary.oov_words
    for _ in range(40):
        observation = env.step(rng.choices(pool, k=rng.randint(1, 10)))
        assert vocabulary.decode(vocabulary.encode(observation)) == observation and "?" not in observation.split()
