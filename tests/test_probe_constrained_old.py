"""scripts/probe_constrained_old.py's guide: while an Edit's old_string is written, only tokens that keep
it a run of whole lines of the latest listing are allowed (by hand, on a three-line file)."""

from __future__ import annotations

from repo_scripts import load_script

from bugfix_rl.config import TrainConfig
from bugfix_rl.policy.build import build_tokenizer_for

LISTING = "1 def f ( x ) : <nl> 2 <indent> y = min ( x , 3 ) <nl> 3 <indent> return max ( y , 1 )"


def _guide_and_context(action: str):
    cfg = TrainConfig()
    cfg.env.name, cfg.policy.copy_head = "tools", True
    tokenizer = build_tokenizer_for(cfg)
    words = tokenizer.episode()
    context = ([tokenizer.bos_id] + words.encode("issue : f returns wrong results") + [tokenizer.end_of_observation_id]
               + words.encode("Read f.py") + [tokenizer.end_of_action_id] + words.encode(LISTING)
               + [tokenizer.end_of_observation_id] + words.encode(action))
    guide = load_script("probe_constrained_old").OldStringGuide(tokenizer)
    return guide, context, lambda ids: sorted(tokenizer.words[i] for i in ids)


def test_old_string_starts_a_line_goes_on_as_the_file_does_and_ends_with_a_whole_line():
    guide, context, names = _guide_and_context("Edit f.py old")
    assert names(guide.allowed(context)) == ["<indent>", "def"]  # the first token of a line
    guide, context, names = _guide_and_context("Edit f.py old <indent>")
    assert names(guide.allowed(context)) == ["return", "y"]
    guide, context, names = _guide_and_context("Edit f.py old <indent> y = min ( x , 3 )")
    assert names(guide.allowed(context)) == ["<nl>", "new"]  # a whole line: it may end, or take the next
    guide, context, names = _guide_and_context("Edit f.py old <indent> y = min ( x , 3 ) <nl>")
    assert names(guide.allowed(context)) == ["<indent>"]


def test_no_guide_outside_old_string_or_once_it_left_the_file():
    for action in ("Read f.py", "Edit f.py old <indent> y new <indent>", "Edit f.py old <indent> z",
                   "Bash pytest ; Edit f.py"):
        guide, context, _ = _guide_and_context(action)
        assert guide.allowed(context) is None, action
