"""The tools env's front-ends: code <-> words, the compact parser, the JSON parser and the schemas."""

import json

import pytest

from bugfix_rl.gym.edit_menu import RENAME_POOL
from bugfix_rl.gym.ops import apply_op, compact_source
from bugfix_rl.gym.tasks import ALL_OPS, ALL_TASKS
from bugfix_rl.gym.tools.calls import MALFORMED_REASONS, TOOL_SCHEMAS, Malformed, ToolCall, validate_call
from bugfix_rl.gym.tools.code_words import (CODE_TOKEN, code_to_words, join_code_words, listing_lines, listing_words,
                                            words_to_code)
from bugfix_rl.gym.tools.render import summarize_script_output, summarize_test_output
from bugfix_rl.gym.tools.repo import make_repo
from bugfix_rl.gym.tools.syntax_compact import parse_compact_turn
from bugfix_rl.gym.tools.syntax_json import parse_json_calls
from bugfix_rl.gym.tools.vocabulary import tools_vocabulary


def _all_code_texts():
    for task in ALL_TASKS:
        repo = make_repo(task, RENAME_POOL[0])
        yield from repo.values()
        for op in ALL_OPS:
            yield apply_op(task, task.source, op) or task.source


# ---------------------------------------------------------------- code <-> words

def test_code_words_round_trip_every_gym_text_exactly():
    for text in _all_code_texts():
        assert words_to_code(code_to_words(text)) + "\n" == text


def test_code_tokens_agree_with_compact_source():
    for task in ALL_TASKS:
        for op in ALL_OPS:
            source = apply_op(task, task.source, op) or task.source
            ours = " / ".join(" ".join(CODE_TOKEN.findall(line)) for line in source.strip().splitlines())
            assert ours == compact_source(source, task.fn_name, task.fn_name)


@pytest.mark.parametrize("words, text", [
    ("return load < cap", "return load < cap"),
    ("return min ( lo , max ( x , hi ) )", "return min(lo, max(x, hi))"),
    ("if ( x , ) == ( [ 4 , - 2 ] , ) :", "if (x,) == ([4, -2],):"),
    ("return ( size + width - 1 ) // width", "return (size + width - 1) // width"),
    ("x = - y ** 2", "x = -y ** 2"),
    ("best = xs [ 0 ]", "best = xs[0]"),
    ("ys = xs [ 1 : ] + xs [ : - 1 ]", "ys = xs[1:] + xs[:-1]"),
    ("def f ( * args , ** kw ) -> int :", "def f(*args, **kw) -> int:"),
    ("f ( a , key = lambda v : v . real )", "f(a, key=lambda v: v.real)"),
    ("return 1.5 if not x else { 1 : 2 }", "return 1.5 if not x else {1: 2}"),
    ("return - 1", "return -1"),
])
def test_join_code_words_uses_pep8_spacing(words, text):
    assert join_code_words(words.split()) == text


def test_layout_words_indent_and_split_lines():
    words = "<indent> if b == 0 : <nl> <indent> <indent> return 0 <nl> <sp> <tab> x".split()
    assert words_to_code(words) == "    if b == 0:\n        return 0\n \tx"
    with pytest.raises(ValueError):
        words_to_code("return <indent> x".split())


def test_listing_words_parse_back():
    lines = ("def pin(a):", "", "    return a // 2")
    words = listing_words(3, lines)
    assert " ".join(words) == "3 def pin ( a ) : <nl> 4 <nl> 5 <indent> return a // 2"
    assert listing_lines(words) == [(3, lines[0]), (4, lines[1]), (5, lines[2])]


def test_test_and_script_output_summaries():
    report = ("===== test session starts =====\ncollected 3 items\n\ntest_pin.py .F.   [100%]\n\n"
              "===== FAILURES =====\n___ test_2 ___\ntest_pin.py:9: in test_2\n    assert pin(13) == 20\n"
              "E   assert 60 == 20\nE    +  where 60 = pin(13)\n===== short test summary info =====\n"
              "FAILED test_pin.py::test_2 - assert 60 == 20\n===== 1 failed, 2 passed in 0.01s =====\n")
    assert summarize_test_output(report) == "assert 60 == 20\n+  where 60 = pin(13)\n1 failed, 2 passed"
    script = "hello\nTraceback (most recent call last):\n  File \"/tmp/x/x.py\", line 1\nZeroDivisionError: boom\n"
    assert summarize_script_output(script) == "hello\nZeroDivisionError: boom"


def test_vocabulary_covers_every_repo_and_the_syntax():
    vocab = tools_vocabulary(ALL_TASKS)
    for word in ("Read", "Edit", "Write", "Bash", "old", "new", "all", "content", ";", "done", "<nl>",
                 "<indent>", "pytest", "?", "not_read", "too_many_calls", "unknown_tool", "passed", "failed"):
        assert word in vocab
    for task in ALL_TASKS:
        for name in (task.fn_name,) + RENAME_POOL:
            for text in make_repo(task, name).values():
                assert set(code_to_words(text)) <= vocab


# ---------------------------------------------------------------- compact front-end

def test_compact_valid_calls():
    calls = parse_compact_turn(
        "Read pin.py offset 2 limit 1 ; Edit pin.py all old <indent> return a new <indent> return b ; "
        "Write new.py content x = 1 <nl> y = 2 ; Bash cd /repo && pytest -q".split())
    assert calls == [
        ToolCall("Read", {"file_path": "pin.py", "offset": 2, "limit": 1}),
        ToolCall("Edit", {"file_path": "pin.py", "old_string": "    return a", "new_string": "    return b",
                          "replace_all": True}),
        ToolCall("Write", {"file_path": "new.py", "content": "x = 1\ny = 2\n"}),
        ToolCall("Bash", {"command": "cd /repo && pytest -q"}),
    ]


def test_compact_new_splits_at_first_new_and_final_answers():
    (call,) = parse_compact_turn("Edit a.py old x new y new z".split())
    assert (call.args["old_string"], call.args["new_string"]) == ("x", "y new z")
    assert parse_compact_turn(["done"]) == [] and parse_compact_turn([]) == []


COMPACT_MALFORMED = [
    (None, "unterminated"),
    ("Read pin.py ; ; Bash ls", "empty_call"),
    ("Read pin.py ;", "empty_call"),
    ("read pin.py", "unknown_tool"),
    ("Grep x", "unknown_tool"),
    ("Read", "missing_argument"),
    ("Bash", "missing_argument"),
    ("Edit pin.py old x", "missing_argument"),
    ("Edit pin.py x new y", "missing_argument"),
    ("Write pin.py x = 1", "missing_argument"),
    ("Read pin.py extra", "unexpected_argument"),
    ("Read pin.py offset 1 offset 2", "unexpected_argument"),
    ("Read pin.py offset two", "bad_value"),
    ("Read pin.py limit 0", "bad_value"),
    ("Edit pin.py old x <indent> y new z", "bad_value"),
    ("Read pin.py ; done", "done_not_alone"),
]


@pytest.mark.parametrize("words, reason", COMPACT_MALFORMED)
def test_compact_malformed_reasons(words, reason):
    calls = parse_compact_turn(None if words is None else words.split())
    assert any(isinstance(c, Malformed) and c.reason == reason for c in calls), calls


# ---------------------------------------------------------------- JSON front-end

def _block(obj) -> str:
    return f"<tool_call>\n{json.dumps(obj)}\n</tool_call>"


def test_json_calls_in_order_with_text_around():
    text = ("Let me look.\n" + _block({"name": "Read", "arguments": {"file_path": "/repo/pin.py"}}) + "\n"
            + _block({"name": "Bash", "arguments": {"command": "pytest", "timeout": 5000}}))
    assert parse_json_calls(text) == [ToolCall("Read", {"file_path": "/repo/pin.py"}),
                                      ToolCall("Bash", {"command": "pytest", "timeout": 5000})]
    assert parse_json_calls("All tests pass now.") == []


JSON_MALFORMED = [
    (None, "unterminated"),
    ("<tool_call>{name: Read}</tool_call>", "invalid_json"),
    ("<tool_call>[1, 2]</tool_call>", "not_an_object"),
    (_block({"arguments": {}}), "not_an_object"),
    (_block({"name": "Read", "arguments": {"file_path": "a"}, "id": 1}), "not_an_object"),
    (_block({"name": "Read", "arguments": "file_path=a"}), "not_an_object"),
    ('<tool_call>{"name": "Read", "arguments": {"file_path": "a"}}', "unclosed_tool_call"),
    (_block({"name": "Glob", "arguments": {}}), "unknown_tool"),
    (_block({"name": "Edit", "arguments": {"file_path": "a", "old_string": "x"}}), "missing_argument"),
    (_block({"name": "Read", "arguments": {"path": "a"}}), "unexpected_argument"),
    (_block({"name": "Read", "arguments": {"file_path": 3}}), "bad_value"),
    (_block({"name": "Read", "arguments": {"file_path": "a", "offset": True}}), "bad_value"),
    (_block({"name": "Read", "arguments": {"file_path": "a", "offset": 0}}), "bad_value"),
    (_block({"name": "Edit", "arguments": {"file_path": "a", "old_string": "x", "new_string": "y",
                                           "replace_all": "yes"}}), "bad_value"),
]


@pytest.mark.parametrize("text, reason", JSON_MALFORMED)
def test_json_malformed_reasons(text, reason):
    calls = parse_json_calls(text)
    assert any(isinstance(c, Malformed) and c.reason == reason for c in calls), calls


def test_every_malformed_reason_has_a_case():
    assert {reason for _, reason in COMPACT_MALFORMED + JSON_MALFORMED} == set(MALFORMED_REASONS)


def test_schemas_are_openai_functions_matching_the_validator():
    assert [s["function"]["name"] for s in TOOL_SCHEMAS] == ["Read", "Edit", "Write", "Bash"]
    for schema in TOOL_SCHEMAS:
        assert schema["type"] == "function"
        params = schema["function"]["parameters"]
        assert params["type"] == "object" and set(params["required"]) <= set(params["properties"])
        example = {"string": "x", "integer": 1, "number": 1.5, "boolean": False}
        args = {key: example[prop["type"]] for key, prop in params["properties"].items()}
        assert validate_call(schema["function"]["name"], args) == ToolCall(schema["function"]["name"], args)


def test_schemas_render_through_a_chat_template():
    """transformers' apply_chat_template(tools=...) takes the schemas as they are (Qwen3-style loop)."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend)
    template = ("{%- for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{%- endfor %}"
                "{%- for message in messages %}{{ message.content }}{%- endfor %}")
    text = tokenizer.apply_chat_template([{"role": "user", "content": "fix it"}], tools=TOOL_SCHEMAS,
                                         chat_template=template, tokenize=False)
    rendered = [json.loads(line) for line in text.splitlines()[: len(TOOL_SCHEMAS)]]
    assert rendered == TOOL_SCHEMAS
