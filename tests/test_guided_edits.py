"""Guided decoding of an Edit's old_string (policy/guided_edits.py, env.guide_old_string): what the guide
allows, by hand on a three-line file; the mask the sampler and the trainer share; and a guided run whose
sampler log-probs the trainer reproduces."""

from __future__ import annotations

import math

import pytest
import torch

from bugfix_rl.config import TrainConfig
from bugfix_rl.policy.build import build_tokenizer_for
from bugfix_rl.policy.guided_edits import (GuideWords, OldStringGuide, allowed_tensor, hold_to_allowed,
                                           replay_guide)
from bugfix_rl.types import Trajectory, collate

LISTING = "1 def f ( x ) : <nl> 2 <indent> y = min ( x , 3 ) <nl> 3 <indent> return max ( y , 1 )"


def _tools_tokenizer():
    cfg = TrainConfig()
    cfg.env.name, cfg.policy.copy_head = "tools", True
    return build_tokenizer_for(cfg)


def _allowed_after(*turns: str, action: str):
    """The guide's allowed words after an issue, then (action, observation) turns, then a partial action."""
    tokenizer = _tools_tokenizer()
    words = tokenizer.episode()
    eoa, eoo = tokenizer.end_of_action_id, tokenizer.end_of_observation_id
    context = [tokenizer.bos_id] + words.encode("issue : f returns wrong results") + [eoo]
    for said, shown in turns:
        context += words.encode(said) + [eoa] + words.encode(shown) + [eoo]
    context += words.encode(action)
    guide = OldStringGuide(GuideWords.of(tokenizer), words)
    guide.feed(context[:len(context) // 2])  # fed in two parts, as the sampler feeds a growing context
    guide.feed(context)
    allowed = guide.allowed()
    return None if allowed is None else sorted(tokenizer.words[i] for i in allowed)


READ = ("Read f.py", LISTING)


def test_old_string_starts_a_line_goes_on_as_the_file_does_and_ends_with_a_whole_line():
    assert _allowed_after(READ, action="Edit f.py old") == ["<indent>", "def"]  # the first token of a line
    assert _allowed_after(READ, action="Edit f.py old <indent>") == ["return", "y"]
    assert _allowed_after(READ, action="Edit f.py old <indent> y = min ( x , 3 )") == ["<nl>", "new"]
    assert _allowed_after(READ, action="Edit f.py old <indent> y = min ( x , 3 ) <nl>") == ["<indent>"]
    assert _allowed_after(READ, action="Edit f.py old <indent> return max ( y , 1 )") == ["new"]  # the file's end


def test_no_guide_outside_old_string_for_an_unlisted_file_or_once_it_left_the_file():
    for action in ("Read f.py", "Edit f.py old <indent> y new <indent>", "Edit f.py old <indent> z",
                   "Bash pytest ; Edit f.py", "Edit g.py old"):
        assert _allowed_after(READ, action=action) is None, action
    assert _allowed_after(action="Edit f.py old") is None  # nothing read yet: nothing to hold it to


def test_each_result_of_a_turn_lists_its_own_file_and_the_latest_listing_counts():
    other = "1 def g ( q ) : <nl> 2 <indent> return q"
    turns = (("Read f.py ; Read g.py ; Bash pytest", f"{LISTING} ; {other} ; 3 passed"),)
    assert _allowed_after(*turns, action="Edit g.py old <indent>") == ["return"]
    assert _allowed_after(*turns, action="Edit f.py old <indent>") == ["return", "y"]
    edited = "1 def f ( x ) : <nl> 2 <indent> y = max ( x , 3 ) <nl> 3 <indent> return max ( y , 1 )"
    turns = (READ, ("Edit f.py old <indent> y = min ( x , 3 ) new <indent> y = max ( x , 3 )", edited))
    assert _allowed_after(*turns, action="Edit f.py old <indent> y = m") is None  # `m` is no word of it
    assert _allowed_after(*turns, action="Edit f.py old <indent> y = max (") == ["x"]


def test_a_semicolon_in_a_program_s_output_does_not_shift_a_listing_onto_another_file():
    other = "1 def g ( q ) : <nl> 2 <indent> return q"
    turns = (("Bash pytest ; Read g.py", f"7 failed ; ok ; {other}"),)  # three results for two calls
    assert _allowed_after(*turns, action="Edit g.py old") is None  # not held to `ok` or to a shifted text
    turns = (("Read f.py ; Bash pytest ; Read g.py", f"{LISTING} ; 7 failed ; ok ; {other}"),)
    assert _allowed_after(*turns, action="Edit f.py old <indent>") == ["return", "y"]  # before the Bash: paired


def test_a_cut_listing_keeps_its_whole_lines_and_a_write_drops_its_file():
    cut = "1 def f ( x ) : <nl> 2 <indent> y = min ( x , 3 ) <nl> 3 <indent> return ..."
    assert _allowed_after(("Read f.py", cut), action="Edit f.py old <indent>") == ["y"]
    assert _allowed_after(("Read f.py", cut), action="Edit f.py old <indent> y = min ( x , 3 )") == ["new"]
    assert _allowed_after(READ, ("Write f.py <indent> return 1", "ok"), action="Edit f.py old") is None
    assert _allowed_after(READ, ("Write f.py", "error : malformed missing_content"),
                          action="Edit f.py old") is None  # refused or not: the guide no longer knows the file
    assert _allowed_after(READ, ("Bash pytest", "3 passed"), action="Edit f.py old <indent>") == ["return", "y"]


def test_the_mask_keeps_the_allowed_ids_and_leaves_unguided_rows_as_they_were():
    logits = torch.tensor([[0.5, 1.0, -2.0, 3.0], [0.1, 0.2, 0.3, 0.4]])
    held = hold_to_allowed(logits, allowed_tensor([(1, 3), None]))
    assert torch.equal(held[1], logits[1])  # bit for bit
    assert held[0, 1] == 1.0 and held[0, 3] == 3.0 and torch.isneginf(held[0, [0, 2]]).all()
    logp = torch.log_softmax(held[0], -1)
    assert math.isclose(float(logp[3]), 3.0 - math.log(math.exp(1.0) + math.exp(3.0)), rel_tol=1e-6)


def test_collate_lines_the_allowed_ids_up_with_the_next_token_positions():
    unguided = Trajectory([1, 5, 6], [False, True, True], [0.0, -0.1, -0.2], 1.0, 0, None)
    guided = Trajectory([1, 5, 6, 7], [False, True, True, True], [0.0, -0.1, -0.2, 0.0], 0.0, 0, None,
                        guided=((2, (6, 9)), (3, (7,))))
    assert collate([unguided, unguided]).allowed is None
    batch = collate([unguided, guided])
    assert batch.allowed.shape == (2, 3, 2)  # [B, T-1, K]: position t-1 holds what ids[t] was drawn from
    assert batch.allowed[0].eq(-1).all() and batch.allowed[1, 0].eq(-1).all()
    assert batch.allowed[1, 1].tolist() == [6, 9] and batch.allowed[1, 2].tolist() == [7, -1]
    assert batch.rows(torch.tensor([1])).allowed.tolist() == [batch.allowed[1].tolist()]


def test_a_chat_model_refuses_a_guided_batch():
    from bugfix_rl.algo.update import token_logprobs

    class Chat:
        def token_logprobs(self, *args):
            raise AssertionError("not reached")

    with pytest.raises(ValueError, match="word sampler"):
        token_logprobs(Chat(), torch.zeros(1, 3, dtype=torch.long), 1.0, allowed=torch.zeros(1, 2, 1, dtype=torch.long))


def test_a_guided_batch_from_the_shipped_tools_base_trains_on_the_sampler_s_own_log_probs():
    """+exp=tools_generated with env.guide_old_string=true (composed as the CLI composes it), its shipped
    RL base: every guided token lies in its allowed set, no Edit names text the file does not hold, and
    the trainer's log-probs of the sampled tokens equal the sampler's (the preflight's check)."""
    from hydra import compose, initialize_config_dir

    from bugfix_rl.algo.update import batch_logprobs
    from bugfix_rl.cli import CONF_DIR
    from bugfix_rl.config import register_configs, to_object
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.gym.tasks import make_tasks
    from bugfix_rl.recipes.starting_policy import build_starting_policy
    from bugfix_rl.rollout.sampler import sample_episodes

    torch.set_num_threads(1)
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = to_object(compose("train", overrides=["exp=tools_generated", "env.guide_old_string=true"]))
    tokenizer = build_tokenizer_for(cfg)
    model = build_starting_policy(cfg.policy, tokenizer, env_cfg=cfg.env).eval()
    make_env, close = make_env_factory(cfg.env)
    tasks = make_tasks("shapes_val")[::5]  # 10 new shapes, 2 per family
    try:
        envs = [make_env(task, None) for task in tasks for _ in range(2)]
        trajectories = sample_episodes(model, tokenizer, envs, list(range(len(envs))), cfg.algo.temperature,
                                       torch.Generator().manual_seed(0))
    finally:
        close()
    guided = [(t, position, ids) for t in trajectories for position, ids in t.guided]
    assert len(guided) > 20
    assert all(t.ids[position] in ids and t.policy_mask[position] for t, position, ids in guided)
    assert sum(t.info.failed["not_found"] for t in trajectories) == 0
    assert sum(t.info.calls["Edit"] for t in trajectories) > 0
    batch = collate(trajectories, tokenizer.pad_id)
    with torch.no_grad():
        logp = batch_logprobs(model, batch, cfg.algo).logp
    gap = ((logp - batch.old_logp).abs() * batch.mask).max()
    assert gap < 1e-4
    single = [i for t, position, ids in guided if len(ids) == 1 for i in ids]
    assert single  # a position with one allowed id: its log-prob is exactly 0 in both
    for t in trajectories:  # the probes' replay of the guide over a finished episode: what the sampler kept
        assert replay_guide(t.ids, t.policy_mask, tokenizer, t.oov_words) == t.guided


def test_an_async_run_s_saved_batches_keep_their_guided_positions():
    """rollout/replay.py: a guided episode written with a resumable run's schedule reads back the same."""
    from bugfix_rl.gym.tools.env import ToolsEpisodeInfo
    from bugfix_rl.rollout.replay import trajectory_from_record, trajectory_record

    episode = Trajectory([1, 5, 6, 7], [False, True, True, True], [0.0, -0.1, -0.2, 0.0], 1.0, 3,
                         ToolsEpisodeInfo(task="minmax/pin", fix_op="swap_minmax"), guided=((2, (6, 9)), (3, (7,))))
    back = trajectory_from_record(trajectory_record(episode))
    assert back.guided == episode.guided and back.ids == episode.ids
    record = trajectory_record(episode)
    del record["guided"]  # written before the field existed
    assert trajectory_from_record(record).guided == ()
