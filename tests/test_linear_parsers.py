"""The plain scans that replaced backtracking regexes on model text find exactly what the regexes did.

Each replaced regex is kept here as the reference and compared on small random strings over the
characters that matter (where backtracking is cheap); test_tools_env_attacks.py shows the scans stay
linear on the inputs that made the regexes hang.
"""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from bugfix_rl.gym.ops import fix_init
from bugfix_rl.gym.tools.render import drop_timing, rule_title
from bugfix_rl.gym.tools.syntax_json import tool_call_blocks
from bugfix_rl.sandbox.probes import collection_crashed, forged_output
from bugfix_rl.sandbox.results import RunResult

RULE = re.compile(r"^[=_!\-]{3,} ?(.*?) ?[=_!\-]{3,}$")
TIMING = re.compile(r" in \d+\.\d+s$")
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
FIX_INIT = re.compile(r"^(\s+\w+ = )([01])$", re.MULTILINE)
SUMMARY_COUNT = re.compile(r"(\d+) (passed|failed|errors?)\b")

SETTINGS = settings(max_examples=200, deadline=None, database=None, derandomize=True)


def regex_fix_init(source: str) -> str | None:
    match = FIX_INIT.search(source)
    if match is None:
        return None
    return source[: match.start(2)] + ("1" if match.group(2) == "0" else "0") + source[match.end(2):]


@SETTINGS
@given(st.text(alphabet="=_!- xa\u00a0", max_size=20))
def test_rule_title_is_the_rule_regex(line):
    match = RULE.match(line)
    assert rule_title(line) == (match.group(1) if match else "")


@SETTINGS
@given(st.text(alphabet=" in0123.s\u0663x", max_size=20))
def test_drop_timing_is_the_timing_regex(summary):
    assert drop_timing(summary) == TIMING.sub("", summary)


@SETTINGS
@given(st.lists(st.sampled_from(["<tool_call>", "</tool_call>", "x", "<", "tool_call>", "<tool_", "call>", "\n"]),
                max_size=12).map("".join))
def test_tool_call_blocks_are_the_lazy_regex(text):
    assert tool_call_blocks(text) == (TOOL_CALL.findall(text), "<tool_call>" in TOOL_CALL.sub("", text))


@SETTINGS
@given(st.text(alphabet=" \t\n\x0b\u00a0xy_1\u00e90=", max_size=30))
def test_fix_init_is_the_multiline_regex(source):
    assert fix_init(source) == regex_fix_init(source)


@SETTINGS
@given(st.lists(st.sampled_from(["1", "23", " ", "passed", "failed", "error", "errors", "x", "\n", ","]),
                max_size=12).map("".join))
def test_probes_read_summaries_as_the_regexes_did(stdout):
    run = RunResult(stdout, 1, "ok", 0.0)
    claims = [{kind.rstrip("s"): int(count) for count, kind in SUMMARY_COUNT.findall(line)}
              for line in stdout.splitlines()]
    forged = any((c.get("passed", 0), c.get("failed", 0)) != (1, 2) for c in claims if "passed" in c or "failed" in c)
    assert forged_output(run, (1, 2)) == forged
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert collection_crashed(run) == (not lines or not re.search(r"\d+ (passed|failed)", lines[-1]))
