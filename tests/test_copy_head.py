"""TinyAgent's copy head: the mixture's math by hand, the two forward paths, sampler = trainer."""

from __future__ import annotations

import math

import pytest
import torch
from logprob_checks import assert_cached_steps_equal_full_pass, sampler_and_trainer_logprobs

from bugfix_rl.config import TrainConfig
from bugfix_rl.gym.tasks import OPERAND_POOL, make_tasks, operand_names
from bugfix_rl.policy.copy_head import mixture_log_probs
from bugfix_rl.policy.tiny import TinyAgent, TinyAgentConfig, architecture, new_tiny_agent


def test_mixture_of_three_context_tokens_by_hand():
    # vocabulary of 4; context ids [2, 3, 2]: positions 0 and 2 hold the same id, so their attention adds
    vocab_p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    attention = torch.tensor([0.5, 0.3, 0.2], requires_grad=False)
    gate = torch.tensor(0.0, requires_grad=True)  # g = 0.5
    logp = mixture_log_probs(vocab_p.log(), gate, attention, torch.tensor([2, 3, 2]))
    # copy = [0, 0, 0.7, 0.3]; P = 0.5 * vocab + 0.5 * copy
    expected = torch.tensor([0.05, 0.10, 0.50, 0.35])
    torch.testing.assert_close(logp.exp(), expected)
    # d log P(2) / d gate_logit = g (1 - g) (P_vocab(2) - P_copy(2)) / P(2) = 0.25 * (0.3 - 0.7) / 0.5
    logp[2].backward()
    assert gate.grad.item() == pytest.approx(-0.2, rel=1e-5)


def test_token_absent_from_context_gets_only_the_vocabulary_share():
    logp = mixture_log_probs(torch.zeros(3), torch.tensor(math.log(3.0)), torch.tensor([1.0]), torch.tensor([0]))
    # g = 0.75; id 1 never occurs in the context: P = 0.75 / 3
    assert logp[1].exp().item() == pytest.approx(0.25, rel=1e-6)
    assert torch.isfinite(logp).all()


def test_gate_fully_open_is_the_plain_softmax_bit_for_bit():
    logits = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    attention = torch.softmax(torch.randn(5, 4), -1)
    mixed = mixture_log_probs(logits, torch.full((5,), float("inf")), attention, torch.randint(0, 7, (5, 4)))
    assert torch.equal(mixed, torch.log_softmax(logits, -1))


def _copy_agent(seed: int = 0, softcap: float = 1.5) -> TinyAgent:
    torch.manual_seed(seed)
    cfg = TinyAgentConfig(max_len=64, copy_head=True, shared_identifier_embedding=True, copy_softcap=softcap)
    model = TinyAgent(40, cfg, identifier_ids=[10, 11, 12])
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)  # far from the init: a real test of the two paths
    return model


def test_cached_steps_equal_the_full_pass():
    model = _copy_agent()
    ids = torch.randint(4, 20, (3, 16), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(ids).exp().sum(-1), torch.ones(3, 16))
    assert_cached_steps_equal_full_pass(model, ids, ([5, 1, 3], [1, 4, 1], [6, 1, 2], [0, 3, 1]))


def test_a_name_is_copied_through_the_match_feature_alone():
    """With the learned scores and the gate pushed to copying, the continuation of the last token wins."""
    model = _copy_agent()
    with torch.no_grad():
        model.copy.query.weight.zero_()
        model.copy.query.bias.zero_()
        model.copy.gate.bias.fill_(-30.0)
        model.copy.gate.weight.zero_()
        model.copy.match_weight.copy_(torch.tensor([20.0, 0.0, 0.0]))
    ids = torch.tensor([[5, 11, 7, 6, 5]])  # after the last 5 comes 11 (an identifier) in the context
    assert model(ids)[0, -1].argmax().item() == 11


def test_soft_cap_by_hand():
    from bugfix_rl.policy.copy_head import soft_capped

    scores = torch.tensor([0.0, 3.0, -30.0, 300.0])
    expected = torch.tensor([0.0, 3 * math.tanh(1.0), -3 * math.tanh(10.0), 3.0])
    torch.testing.assert_close(soft_capped(scores, 3.0), expected)
    assert torch.equal(soft_capped(scores, 0.0), scores)


def test_a_full_match_outweighs_any_learned_preference_under_the_cap():
    """Learned scores pushed far towards the wrong position: uncapped they win, capped the exact
    3-gram continuation wins (the held-out `min ( 0 , ...` failure of an uncapped RL policy)."""
    ids = torch.tensor([[5, 6, 7, 11, 9, 5, 6, 7]])  # after `5 6 7` the context continues with 11
    winners = {}
    for softcap in (0.0, 3.0):
        model = _copy_agent(softcap=softcap)
        with torch.no_grad():
            model.copy.gate.bias.fill_(-30.0)
            model.copy.gate.weight.zero_()
            model.copy.match_weight.copy_(torch.tensor([3.0, 3.0, 3.0]))
            model.copy.query.weight.zero_()
            model.copy.query.bias.fill_(1.0)  # query = all ones
        # keys: 0 everywhere but position 4 (id 9), whose learned score query . key / sqrt(d) is 50
        d = model.cfg.copy_dim
        keys = torch.zeros(len(ids[0]), d)
        keys[4] = 50.0 / math.sqrt(d)
        model.copy.key.forward = lambda hidden: keys[: hidden.shape[-2]].expand(*hidden.shape[:-1], d)
        winners[softcap] = model(ids)[0, -1].argmax().item()
    assert winners == {0.0: 9, 3.0: 11}


def test_suffix_match_by_hand():
    """`( 0 ,` (most recent first: `,` `0` `(`) against a candidate after `( level ,`: offsets 1 and 3
    agree, so offsets score w1 + w3, while a suffix match stops at the first disagreement (w1)."""
    from bugfix_rl.policy.copy_head import match_scores

    comma, zero, paren, level = 7, 8, 9, 10
    query = torch.tensor([[comma, zero, paren]])  # [Q=1, N=3]
    candidates = torch.tensor([[comma, level, paren],   # after `( level ,`
                               [comma, zero, paren],    # after `( 0 ,`: the full match
                               [level, zero, paren]])   # after `( 0 level`: no run from the last token
    weights = torch.tensor([3.0, 2.5, 3.5])
    assert match_scores(query, candidates, weights).tolist() == [[6.5, 9.0, 6.0]]
    assert match_scores(query, candidates, weights, suffix=True).tolist() == [[3.0, 9.0, 0.0]]


def test_a_match_limit_drops_the_longer_ngrams_in_both_modes():
    """limit n lets only the last n query tokens take part: the same query and candidates as above,
    asked three times (limits 1, 2, 3 as three query rows)."""
    from bugfix_rl.policy.copy_head import match_scores

    comma, zero, paren, level = 7, 8, 9, 10
    query = torch.tensor([[comma, zero, paren]] * 3)  # [Q=3, N=3]
    candidates = torch.tensor([[comma, level, paren], [comma, zero, paren], [level, zero, paren]])
    weights = torch.tensor([3.0, 2.5, 3.5])
    limit = torch.tensor([1, 2, 3])
    assert match_scores(query, candidates, weights, limit=limit).tolist() == [
        [3.0, 3.0, 0.0], [3.0, 5.5, 2.5], [6.5, 9.0, 6.0]]
    assert match_scores(query, candidates, weights, suffix=True, limit=limit).tolist() == [
        [3.0, 3.0, 0.0], [3.0, 5.5, 0.0], [3.0, 9.0, 0.0]]


@pytest.mark.parametrize("suffix", [False, True])
def test_cached_steps_equal_the_full_pass_with_either_match(suffix):
    model = _copy_agent()
    model.copy.suffix_match = suffix
    ids = torch.randint(4, 9, (2, 20), generator=torch.Generator().manual_seed(2))  # 5 ids: many partial matches
    full = model(ids)
    cache = model.new_cache(2)
    for t in range(ids.shape[1]):
        out = model.forward_step(ids[:, t:t + 1], torch.tensor([1, 1]), cache)
        torch.testing.assert_close(out, full[:, t], atol=1e-5, rtol=1e-5)


def test_shared_identifier_embedding_hides_which_name():
    model = _copy_agent()
    a, b = torch.tensor([[5, 10, 7]]), torch.tensor([[5, 12, 7]])
    h_a = model._embed(a)
    assert torch.equal(h_a, model._embed(b))


def test_sampler_and_trainer_log_probs_are_equal():
    """Token-in/token-out with the copy head: episodes sampled with the KV cache in the tools env, then
    the trainer's full pass over the same ids gives the sampler's log-probs."""
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.rollout.sampler import sample_episodes

    torch.set_num_threads(1)
    cfg = TrainConfig()
    cfg.env.name = "tools"
    cfg.policy.copy_head = cfg.policy.shared_identifier_embedding = True
    cfg.policy.copy_softcap = 6.0  # as in +exp=tools
    tokenizer = build_tokenizer_for(cfg)
    torch.manual_seed(0)
    model = new_tiny_agent(tokenizer, architecture(cfg.policy)).eval()
    make_env, close = make_env_factory(cfg.env)
    try:
        tasks = make_tasks("train")[:4]
        envs = [make_env(task, None) for task in tasks for _ in range(2)]
        trajectories = sample_episodes(model, tokenizer, envs, list(range(len(envs))), 1.0,
                                       torch.Generator().manual_seed(0))
    finally:
        close()
    trainer, sampler = sampler_and_trainer_logprobs(model, trajectories, tokenizer.pad_id)
    assert len(trainer) > 50
    torch.testing.assert_close(trainer, sampler, atol=2e-5, rtol=1e-5)


def test_heldout_operand_names_never_occur_in_training_tasks_or_demonstrations():
    """The tools capstone's gain must come from copying: no held-out operand name is ever trained on."""
    from bugfix_rl.gym.tools.code_words import code_to_words
    from bugfix_rl.gym.tools.repo import make_repo

    heldout = {name for task in make_tasks("heldout") for name in operand_names(task)}
    assert heldout and not heldout & set(OPERAND_POOL)
    for task in make_tasks("train"):
        words = {w for text in make_repo(task, task.fn_name).values() for w in code_to_words(text)}
        assert not heldout & words, task.name
    # the demonstrations the tools RL base clones: training tasks and their shape variants only, names
    # from OPERAND_POOL
    from bugfix_rl.config import ToolsBaseRecipeConfig
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.recipes.rl_base import noisy_tools_demonstrations

    cfg = TrainConfig()
    cfg.env.name = "tools"
    tokenizer = build_tokenizer_for(cfg)
    recipe = ToolsBaseRecipeConfig(episodes=60, p_shape_variant=0.5)  # as +exp=tools: shape variants too
    demos = noisy_tools_demonstrations(recipe, tokenizer, cfg.env)
    seen = {tokenizer.words[i] for demo in demos for i in demo.ids}
    assert not heldout & seen
    assert seen & set(OPERAND_POOL)


def test_rl_tasks_with_renamed_operands_keep_their_tests_and_never_use_a_heldout_name():
    """env.rename_operands: each drawn training task is a copy whose operands come from OPERAND_POOL;
    the hidden tests (positional) still grade it, held-out names never appear, the draw is seeded."""
    from bugfix_rl.config import AlgoConfig
    from bugfix_rl.gym.ops import code_states
    from bugfix_rl.gym.tasks import FAMILY_OP
    from bugfix_rl.gym.tasks import base_task_name
    from bugfix_rl.rollout.collect import TaskStats, draw_step_tasks

    algo, tasks = AlgoConfig(prompts_per_step=20), make_tasks("train")
    heldout = {name for task in make_tasks("heldout") for name in operand_names(task)}
    drawn = draw_step_tasks(tasks, algo, torch.Generator().manual_seed(0), rename_operands=True)
    again = draw_step_tasks(tasks, algo, torch.Generator().manual_seed(0), rename_operands=True)
    assert [t.source for t in drawn] == [t.source for t in again]
    by_name = {t.name: t for t in tasks}
    for copy in drawn:
        original = by_name[base_task_name(copy.name)]
        assert copy.source != original.source and set(operand_names(copy)) <= set(OPERAND_POOL)
        assert not heldout & set(operand_names(copy))
        assert copy.hidden_tests == original.hidden_tests
        states = code_states(copy)  # still buggy under the new names, and the family's fix still fixes it
        assert not states[None].hidden_pass and states[FAMILY_OP[copy.name.split("/")[0]]].hidden_pass
    one = make_tasks("train")[:1]
    copies = [draw_step_tasks(one, algo, torch.Generator().manual_seed(k), rename_operands=True)[0] for k in range(8)]
    by_copy_name = {}
    for copy in copies:  # a copy's name says its renaming: gym/ops.py caches code states by name
        assert by_copy_name.setdefault(copy.name, copy.source) == copy.source
    assert len(by_copy_name) > 1
    stats = TaskStats()  # pass rates are kept per original task, whatever the copy's names
    stats.update([type("T", (), {"info": type("I", (), {"task": drawn[0].name, "success": True})(), "reward": 1.0})()])
    assert set(stats.rate) == {base_task_name(drawn[0].name)}


def test_the_trainer_samples_renamed_copies_when_asked():
    """env.rename_operands reaches the tasks each step's groups are sampled on (edit menu: fast)."""
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.policy.build import build_policy, build_tokenizer_for
    from bugfix_rl.run.trainer import Trainer

    torch.set_num_threads(1)
    submitted = {}
    for rename in (False, True):
        cfg = TrainConfig()
        cfg.env.rename_operands = rename
        cfg.algo.group_size, cfg.algo.prompts_per_step = 2, 4
        tokenizer = build_tokenizer_for(cfg)
        make_env, close = make_env_factory(cfg.env)
        trainer = Trainer(cfg, build_policy(cfg.policy, tokenizer, init="scratch"), tokenizer, make_env,
                          torch.Generator().manual_seed(0))
        submit = trainer.pool.submit

        def recording_submit(tasks, *args, _submit=submit, _rename=rename, **kwargs):
            submitted.setdefault(_rename, list(tasks))
            return _submit(tasks, *args, **kwargs)

        trainer.pool.submit = recording_submit
        try:
            trainer.step(0)
        finally:
            trainer.close()
            close()
    assert not any("~" in t.name for t in submitted[False])
    assert all("~" in t.name and set(operand_names(t)) <= set(OPERAND_POOL) for t in submitted[True])


def test_every_architecture_switch_and_the_kernels_change_the_base_key(monkeypatch):
    """A base built with another copy-head switch, or on other CPU kernels, never loads for this config."""
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.recipes import rl_base

    cfg = TrainConfig()
    cfg.env.name = "tools"
    cfg.policy.copy_head = cfg.policy.shared_identifier_embedding = True
    tokenizer = build_tokenizer_for(cfg)
    env_fields = {k: getattr(cfg.env, k) for k in ("max_turns", "max_calls_per_turn", "rename")}

    def key() -> str:
        return rl_base.recipe_key(cfg.policy.tools_base, architecture(cfg.policy), tokenizer, env_fields)

    keys = [key()]
    cfg.policy.copy_softcap = 6.0
    keys.append(key())
    cfg.policy.copy_suffix_match = True
    keys.append(key())
    cfg.policy.copy_edit_align = True
    keys.append(key())
    cfg.policy.copy_edit_resume = True
    keys.append(key())
    cfg.policy.copy_resume_cut = True
    keys.append(key())
    cfg.policy.copy_resume_next = True
    keys.append(key())
    cfg.policy.copy_lookup = True
    keys.append(key())
    monkeypatch.setattr(rl_base, "kernel_signature", lambda: "aten=AVX512 mkl_cbwr=auto onednn=auto")
    keys.append(key())
    assert len(set(keys)) == len(keys), keys


def test_a_checkpoint_loads_only_with_the_copy_head_it_was_trained_with(tmp_path):
    import dataclasses

    from bugfix_rl.checkpoint import CheckpointError, model_tensors, save_checkpoint
    from bugfix_rl.policy.build import build_policy, build_tokenizer_for

    cfg = TrainConfig()
    cfg.env.name = "tools"
    cfg.policy.copy_head = cfg.policy.shared_identifier_embedding = True
    tokenizer = build_tokenizer_for(cfg)
    path = tmp_path / "policy.safetensors"
    model = new_tiny_agent(tokenizer, architecture(cfg.policy))
    save_checkpoint(path, model_tensors(model), {"config": dataclasses.asdict(cfg), "vocab": list(tokenizer.words)})
    build_policy(cfg.policy, tokenizer, init=str(path))  # same switches: loads
    cfg.policy.copy_softcap = 6.0
    with pytest.raises(CheckpointError, match="copy_softcap=0.0"):
        build_policy(cfg.policy, tokenizer, init=str(path))


def test_edits_copied_counts_old_strings_seen_in_an_earlier_observation():
    from bugfix_rl.gym.tasks import task_by_name
    from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig

    env = ToolsEnv(task_by_name("compare/under_cap"), ToolsEnvConfig(), "pin")
    edit = ["Edit", "pin.py", "old", "<indent>", "return", "load", "<", "cap", "new",
            "<indent>", "return", "load", "<=", "cap"]
    env.step(edit)  # before any Read: refused, and nothing it names was shown
    assert env.info.failed["not_read"] == 1 and env.info.edits_copied == 0
    env.step(["Read", "pin.py", ";"] + edit)  # in the Read's own turn the model had not seen the file yet
    assert env.info.calls["Edit"] == 2 and env.info.edits_copied == 0 and not env.info.failed["not_found"]
    env.step(edit[:4] + ["return", "load", "<=", "cap", "new", "<indent>", "return", "load", "<", "cap"])
    assert env.info.calls["Edit"] == 3 and env.info.edits_copied == 1  # seen in the last Edit's listing


def test_preflight_passes_on_the_tools_env_with_the_copy_head():
    """The invariants on a real first tools-env batch of +exp=tools (composed as the CLI composes it) from
    its shipped RL base, whose groups already carry a signal."""
    from hydra import compose, initialize_config_dir

    from bugfix_rl.cli import CONF_DIR
    from bugfix_rl.config import to_object
    from bugfix_rl.config import register_configs
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.recipes.starting_policy import build_starting_policy
    from bugfix_rl.run.preflight import run_preflight

    torch.set_num_threads(1)
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = to_object(compose("train", overrides=["exp=tools", "algo.prompts_per_step=4"]))
    assert cfg.policy.copy_head and cfg.env.name == "tools"
    tokenizer = build_tokenizer_for(cfg)
    model = build_starting_policy(cfg.policy, tokenizer, env_cfg=cfg.env)
    make_env, close = make_env_factory(cfg.env)
    try:
        checks = run_preflight(cfg, model, tokenizer, make_env)
    finally:
        close()
    assert {name for name, check in checks.items() if not check["ok"]} == set()
    assert checks["sampler = trainer log-prob"]["value"] < 1e-4


def test_edit_alignment_points_at_the_old_string_token_in_line_with_the_one_being_written():
    """By hand: OLD=5, NEW=6, END=2. `Edit f old a b c new x` -> writing new's k-th token aligns with
    old's k-th; nothing before `new`, after the end token, or past old_string's length."""
    from bugfix_rl.policy.copy_head import edit_alignment

    #         0   1   2  3   4   5   6   7   8   9  10  11
    ids = torch.tensor([[9, 5, 20, 21, 22, 6, 30, 31, 32, 33, 2, 9]])
    # t=5 (`new`) predicts new's token 0 -> old's token 0 at position 2; t=6 -> 3; t=7 -> 4; t=8 -> 5 is
    # `new` itself (past old_string): none; t=10 (the end token) and after: none
    expected = [-1, -1, -1, -1, -1, 2, 3, 4, -1, -1, -1, -1]
    assert edit_alignment(ids, 5, 6, [2]).tolist() == [expected]
    # `new` before `old` (a malformed call) and a second call reusing old's position: no feature
    assert edit_alignment(torch.tensor([[6, 20, 5, 21]]), 5, 6, [2]).tolist() == [[-1, -1, -1, -1]]


def _edit_feature_agent(**switches) -> TinyAgent:
    """A copy-head TinyAgent with OLD=5, NEW=6 and END in (2, 3), weights far from the init."""
    torch.manual_seed(0)
    cfg = TinyAgentConfig(max_len=64, copy_head=True, shared_identifier_embedding=True, copy_softcap=1.5, **switches)
    model = TinyAgent(40, cfg, identifier_ids=[10, 11, 12], edit_markers=(5, 6, [2, 3]))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def _edit_ids() -> torch.Tensor:
    """[3, 16] random ids holding an Edit's old (tokens 4-7) and new (tokens 9-); row 2's call ends at 12."""
    ids = torch.randint(4, 20, (3, 16), generator=torch.Generator().manual_seed(1))
    ids[:, 3], ids[:, 8] = 5, 6
    ids[2, 12] = 2
    return ids


def _only_feature(model: TinyAgent, weight: torch.nn.Parameter) -> None:
    """Leave `weight`'s feature alone to decide: no learned score, no match features, the gate shut."""
    with torch.no_grad():
        model.copy.query.weight.zero_()
        model.copy.query.bias.zero_()
        model.copy.match_weight.zero_()
        model.copy.gate.weight.zero_()
        model.copy.gate.bias.fill_(-30.0)
        weight.fill_(20.0)


def test_the_aligned_feature_copies_the_token_in_line_and_cached_steps_equal_the_full_pass():
    model = _edit_feature_agent(copy_edit_align=True)
    ids = _edit_ids()
    assert_cached_steps_equal_full_pass(model, ids, ([5, 1, 3], [1, 4, 1], [6, 1, 2], [0, 3, 1], [4, 7, 9]))
    _only_feature(model, model.copy.align_weight)  # the aligned old token is copied
    #                    0  1   2   3  4   5   6
    ids = torch.tensor([[5, 11, 12, 6, 7, 11, 9]])  # old 11 12 new 7 ...
    logp = model(ids)[0]
    assert logp[3].argmax().item() == 11 and logp[4].argmax().item() == 12


def test_the_oracle_probe_scores_each_policy_token_of_the_oracles_episode():
    """scripts/probe_oracle.py: the oracle's episode on a held-out task, each policy token's probability
    under a policy; they multiply to the total it reports, and the episode holds the fixing Edit."""
    from bugfix_rl.gym.envs import make_env_factory, oracle_for
    from bugfix_rl.policy.build import build_tokenizer_for
    from repo_scripts import load_script

    module = load_script("probe_oracle")
    cfg = TrainConfig()
    cfg.env.name = "tools"
    cfg.policy.copy_head = cfg.policy.shared_identifier_embedding = True
    tokenizer = build_tokenizer_for(cfg)
    torch.manual_seed(0)
    model = new_tiny_agent(tokenizer, architecture(cfg.policy)).eval()
    task = next(t for t in make_tasks("heldout") if t.name == "minmax/saturate")
    make_env, close = make_env_factory(cfg.env)
    try:
        words, total = module.probe(model, tokenizer, make_env, oracle_for(cfg.env), task, top=3)
    finally:
        close()
    chosen = [p for _, p, _ in words if p is not None]
    assert all(0 < p <= 1 for p in chosen) and len(chosen) > 20
    assert math.isclose(sum(math.log(p) for p in chosen), total, rel_tol=1e-4)
    for word, p, best in words:  # --top: the policy's three likeliest words there, in order; the chosen
        if p is not None:        # word is among them unless it is no likelier than the third
            assert len(best) == 3 and best[0][1] >= best[1][1] >= best[2][1] >= 0 and best[0][1] >= p - 1e-6
            assert word in [w for w, _ in best] or p <= best[2][1] + 1e-6
    text = " ".join(w for w, p, _ in words if p is not None)
    assert "old <indent> return min ( 0 , max ( level , top ) ) new <indent> return max ( 0 , min ( level , top ) )" in text


def test_the_copy_pointer_follows_old_string_across_an_insertion_and_a_swap():
    """By hand: OLD=5, NEW=6, END=2. The pointer starts at old_string's first token when `new` is read,
    advances on a copy, by two on the token after the pointed one, and stays on anything else."""
    from bugfix_rl.policy.copy_head import edit_resume_pointer

    # insertion: old `20 21 22 23`, new `20 21 30 31 22 23` (30 31 inserted), then the call ends
    #                    0  1  2  3   4   5   6   7  8   9  10  11  12  13  14 15
    ids = torch.tensor([[1, 9, 9, 5, 20, 21, 22, 23, 6, 20, 21, 30, 31, 22, 23, 2]])
    # after `new` (t=8): old's first token (4); copies move it to 5, 6; the inserted 30, 31 leave it at
    # 6 (`22`, what comes next); the copied 22 -> 7; the copied 23 leaves old_string: none; end: none
    expected = [-1] * 8 + [4, 5, 6, 6, 6, 7, -1, -1]
    # the run of copies up to each token: 0 at `new`, 1 and 2 after two copies, 0 after each inserted one
    expected_runs = [-1] * 8 + [0, 1, 2, 0, 0, 1, -1, -1]
    assert [t.tolist() for t in edit_resume_pointer(ids, 5, 6, [2])] == [[expected], [expected_runs]]
    # swap: old `40 41 42 43 44 41` (min ( 0 , max (), new `44 41 42 43 40 41`
    #                    0   1   2   3   4   5   6  7   8   9  10  11  12  13
    ids = torch.tensor([[5, 40, 41, 42, 43, 44, 41, 6, 44, 41, 42, 43, 40, 41]])
    # 44 is neither the pointed 40 nor the next 41: stays at 1; 41 is the token after it: jumps to 3 (42,
    # the `0` after `min (`); copies to 4, 5; 40 stays at 5; 41 (after the pointed 44) jumps to 7 = `new`
    expected = [-1] * 7 + [1, 1, 3, 4, 5, 5, -1]
    # 44 replaced a token (run 0); the 41 after it is a copy the jump confirms (1), then 42, 43 (2, 3)
    expected_runs = [-1] * 7 + [0, 0, 1, 2, 3, 0, -1]
    assert [t.tolist() for t in edit_resume_pointer(ids, 5, 6, [2])] == [[expected], [expected_runs]]
    # `new` before any `old`, and a `new` after the call ended: no pointer
    pointers, runs = edit_resume_pointer(torch.tensor([[6, 20, 5, 21, 2, 6, 21]]), 5, 6, [2])
    assert pointers.tolist() == runs.tolist() == [[-1] * 7]


def test_the_copy_pointer_feature_copies_the_pointed_token_and_cached_steps_equal_the_full_pass():
    model = _edit_feature_agent(copy_edit_resume=True, copy_suffix_match=True)
    ids = _edit_ids()
    ids[0, 9:12] = ids[0, 4:7]  # row 0 copies, so its pointer moves
    assert_cached_steps_equal_full_pass(model, ids, ([5, 1, 3], [1, 4, 1], [6, 1, 2], [0, 3, 1], [4, 7, 9]))
    _only_feature(model, model.copy.resume_weight)  # the pointed old token is copied
    #                    0  1   2   3  4  5   6   7
    ids = torch.tensor([[5, 11, 12, 7, 6, 11, 9, 8]])  # old 11 12 7, new 11 9 ...
    logp = model(ids)[0]
    # after `new`: 11; after copying 11: 12; after the inserted 9: still 12
    assert [logp[t].argmax().item() for t in (4, 5, 6)] == [11, 12, 12]


def test_the_copy_pointer_over_whole_sequences_equals_reading_token_by_token():
    """edit_resume_pointer (only over new_strings) against advance_resume read at every position, as the
    KV cache does, on random sequences dense in old/new/end markers."""
    from bugfix_rl.policy.copy_head import ResumeState, advance_resume, edit_resume_pointer

    generator = torch.Generator().manual_seed(0)
    markers, active = (5, 6, [2, 3]), 0
    for _ in range(50):
        ids = torch.randint(2, 10, (4, 40), generator=generator)  # 2, 3 end; 5 old; 6 new; 4, 7, 8, 9 text
        state, expected, expected_runs = ResumeState.empty(4), [], []
        for t in range(ids.shape[1]):
            advance_resume(state, ids[:, t], t, ids, torch.ones(4, dtype=torch.bool), markers)
            expected.append(state.current())
            expected_runs.append(state.current_run())
        pointers, runs = edit_resume_pointer(ids, *markers)
        assert torch.equal(pointers, torch.stack(expected, 1))
        assert torch.equal(runs, torch.stack(expected_runs, 1))
        active += int((torch.stack(expected, 1) >= 0).sum())
    assert active > 100  # the pointer was on often enough for the comparison to mean something


def test_the_pointer_cut_keeps_a_match_from_reaching_back_past_a_replaced_token():
    """By hand: OLD=5, NEW=6; old `20 21 22 23 21 24`, new `23 21` (23 replaced 20; 21 is the copy the
    pointer jumps on, so it points at 22). The 2-gram `23 21` matches only 24 (after `23 21` in old);
    the 1-gram `21` matches 22 and 24. Match weights 3 each, the pointer's 1: without the cut 24 scores
    3 + 3 against 22's 3 + 1; with it, `23` was not copied, so only the 1-gram counts: 22 has 3 + 1."""
    #                    0   1   2   3   4   5   6  7   8   9
    ids = torch.tensor([[5, 20, 21, 22, 23, 21, 24, 6, 23, 21]])
    predictions = {}
    for cut in (False, True):
        model = _edit_feature_agent(copy_edit_resume=True, copy_suffix_match=True, copy_resume_cut=cut)
        _only_feature(model, model.copy.resume_weight)
        with torch.no_grad():
            model.copy.resume_weight.fill_(1.0)
            model.copy.match_weight.fill_(3.0)
        logp = model(ids)[0, 9]
        predictions[cut] = logp.argmax().item()
        # the copy distribution by hand: scores 3+1 at 22, 3 (+3 uncut) at 24, 0 at the other 8 positions
        at_24 = 6.0 if not cut else 3.0
        total = math.exp(4.0) + math.exp(at_24) + 8
        torch.testing.assert_close(logp[22].exp(), torch.tensor(math.exp(4.0) / total), atol=1e-5, rtol=1e-4)
    assert predictions == {False: 24, True: 22}


def test_the_pointer_cut_cached_steps_equal_the_full_pass():
    """Every position, fed one token at a time, against the full pass: a plain copy (row 0), the swap of
    the hand test above followed by copies, runs up to 4 (row 1), an insertion (row 2). The cut must
    change the prediction somewhere, or this would not test it."""
    #                    0  1   2   3   4   5   6   7   8   9  10  11  12  13  14  15
    ids = torch.tensor([[9, 5, 10, 11, 12, 13, 6, 10, 11, 12, 13, 4, 14, 15, 16, 17],
                        [5, 20, 21, 22, 23, 21, 24, 6, 23, 21, 22, 23, 21, 24, 2, 9],
                        [9, 5, 10, 11, 12, 13, 6, 10, 19, 11, 12, 2, 14, 15, 16, 17]])
    cut = _edit_feature_agent(copy_edit_resume=True, copy_suffix_match=True, copy_resume_cut=True)
    assert_cached_steps_equal_full_pass(cut, ids, [[1, 1, 1]] * ids.shape[1])
    uncut = _edit_feature_agent(copy_edit_resume=True, copy_suffix_match=True)
    assert torch.equal(cut.copy.match_weight, uncut.copy.match_weight)  # the same weights; the cut has none
    changed = (cut(ids) - uncut(ids)).abs().amax(-1) > 1e-4  # [B, T]
    assert changed[1, 9]  # after the swap `23 21`: the 2-gram is cut
    assert not changed[0].any()  # a plain copy: no match ever reaches back past a non-copy


def test_the_next_feature_points_past_a_replaced_token_only():
    """By hand: OLD=5, NEW=6; old `20 21 22`. After `new` (nothing replaced yet), after a copy, and after
    an insertion that is followed by a copy, no target; right after a token that is not the pointed one,
    the token after the pointed one."""
    from bugfix_rl.policy.copy_head import edit_resume_pointer, resume_next_target

    #                    0   1   2   3  4   5   6   7   8
    ids = torch.tensor([[5, 20, 21, 22, 6, 20, 30, 22, 2]])  # new `20 30 22`: 30 replaces 21
    pointers, runs = edit_resume_pointer(ids, 5, 6, [2])
    # t=4 `new`: pointer 1, none; t=5 copied 20: pointer 2, none; t=6 30 (not 21): pointer still 2,
    # target 3 (`22`); t=7 22 is the token after the pointed one: pointer leaves old_string
    assert resume_next_target(ids, pointers, runs, torch.arange(9)[None], 6).tolist() == [[-1] * 6 + [3, -1, -1]]
    # with the next weight alone deciding, the copy after the replaced token is `22`
    model = _edit_feature_agent(copy_edit_resume=True, copy_suffix_match=True, copy_resume_next=True)
    _only_feature(model, model.copy.next_weight)
    with torch.no_grad():
        model.copy.resume_weight.zero_()
    assert model(ids)[0, 6].argmax().item() == 22


def test_the_next_feature_cached_steps_equal_the_full_pass():
    """As the cut's test: one token at a time over a copy, a swap and an insertion, with both switches."""
    ids = torch.tensor([[9, 5, 10, 11, 12, 13, 6, 10, 11, 12, 13, 4, 14, 15, 16, 17],
                        [5, 20, 21, 22, 23, 21, 24, 6, 23, 21, 22, 23, 21, 24, 2, 9],
                        [9, 5, 10, 11, 12, 13, 6, 10, 19, 11, 12, 2, 14, 15, 16, 17]])
    model = _edit_feature_agent(copy_edit_resume=True, copy_suffix_match=True, copy_resume_cut=True,
                                copy_resume_next=True)
    with torch.no_grad():
        model.copy.next_weight.fill_(2.0)  # it starts at 0: a feature with no weight would test nothing
    assert_cached_steps_equal_full_pass(model, ids, [[1, 1, 1]] * ids.shape[1])
    # ragged feeds as in sampling (an observation of several tokens beside single tokens, a row that
    # feeds nothing), so the scan state advances over multi-token feeds and padded slots
    assert_cached_steps_equal_full_pass(model, ids, ([7, 1, 8], [1, 7, 0], [3, 0, 1], [5, 8, 7]))


@pytest.mark.parametrize("copy_head", [False, True])
def test_a_long_feed_beside_an_ended_row_near_the_context_end_stays_in_the_cache(copy_head):
    """Row 0 sits at 120 of a 128-token context and feeds nothing (its episode ended) while row 1 feeds an
    80-token observation: row 0's padded slots reach position 199, past the cache's 192. Found in a
    +exp=tools run (`index 320 is out of bounds`); row 1's predictions must equal the full pass."""
    torch.manual_seed(0)
    cfg = TinyAgentConfig(max_len=128, copy_head=copy_head, shared_identifier_embedding=copy_head)
    model = TinyAgent(40, cfg, identifier_ids=[10, 11, 12] if copy_head else None).eval()
    ids = torch.randint(4, 40, (2, 120), generator=torch.Generator().manual_seed(1))
    assert_cached_steps_equal_full_pass(model, ids, ([120, 20], [0, 80]))
