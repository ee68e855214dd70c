"""The copy head's lookup output (policy/copy_lookup.py): its targets by hand, the three-term mixture by
hand, the two forward paths equal, and nothing changed with the switch off; the same for the heads'
read of the lookup's target (`copy_lookup_feed`)."""

from __future__ import annotations

import math

import pytest
import torch
from logprob_checks import assert_cached_steps_equal_full_pass

from bugfix_rl.policy.copy_head import ResumeState, advance_resume, edit_resume_pointer
from bugfix_rl.policy.copy_lookup import fed_hidden, lookup_mixture_log_probs, lookup_target, suffix_runs
from bugfix_rl.policy.tiny import TinyAgent, TinyAgentConfig

OLD, NEW, ENDS = 5, 6, [2, 3]


def _targets(ids: torch.Tensor, ngram: int = 3) -> tuple[list, list]:
    """(target, kind) of the full pass at every position of ids [1, T], as lists."""
    from bugfix_rl.policy.copy_head import shifted

    T = ids.shape[1]
    query = torch.stack([shifted(ids, n - 1, -2) for n in range(1, ngram + 1)], -1)
    prev = torch.stack([shifted(ids, n, -1) for n in range(1, ngram + 1)], -1)
    pointer, _, exhausted = edit_resume_pointer(ids, OLD, NEW, ENDS, with_exhausted=True)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    target, kind = lookup_target(suffix_runs(query, prev), causal, pointer, exhausted)
    return target[0].tolist(), kind[0].tolist()


def test_lookup_targets_by_hand():
    """A listed line `20 21 22 23` (after the end token 2), then `old 20 21` copying it: after `20` a lone
    match, no target; after `20 21` the run of 2 points at 22 (kind 1). Then `new`: the pointer's tokens
    (kind 0) until old_string is used up; then none."""
    #                    0   1   2   3   4  5  6   7   8  9  10  11  12
    ids = torch.tensor([[20, 21, 22, 23, 2, 5, 20, 21, 6, 20, 21, 9, 9]])
    target, kind = _targets(ids)
    # t=0 `20`: no earlier token -> none; t=1 `21`: `21` never came before -> none; t=2, t=3 likewise;
    # t=4 `2`: none; t=5 `old`: none; t=6 `20` (old's first): 20 came at 0, but a run of 1 is too short
    assert target[:7] == [-1] * 7
    # t=7 `21`: the run `20 21` matches only at 0-1 -> 2 (a run of 2: kind 1)
    assert (target[7], kind[7]) == (2, 1)
    # t=8 `new`: the pointer at old's first token (6), kind 0; t=9 copied 20 -> 7; t=10 copied 21: the
    # pointer reaches `new` (8), old_string is used up: none from there until the call ends
    assert (target[8], kind[8]) == (6, 0) and (target[9], kind[9]) == (7, 0)
    assert target[10:] == [-1, -1, -1]


def test_after_a_change_the_lookup_follows_the_pointer_where_it_sits():
    """old `20 40 41 42 43` (`a min ( x )`), new `20 44 41 42 43` (`a max ( x )`): after `44` (not the
    pointed 40) the pointer still sits on 40 and the lookup offers it (the measured choice, module doc);
    `41` is the token after it, the pointer jumps and the lookup offers 42."""
    #                   0   1   2   3   4   5  6   7   8   9
    ids = torch.tensor([[5, 20, 40, 41, 42, 43, 6, 20, 44, 41]])
    target, kind = _targets(ids)
    # t=6 `new`: old's first (1); t=7 copied 20: 2 (40); t=8 `44`: still 2; t=9 `41` after the pointed: 4 (42)
    assert target[6:] == [1, 2, 2, 4] and kind[6:] == [0, 0, 0, 0]


def test_the_latest_of_the_longest_runs_wins():
    #                    0  1   2  3  4   5  6  7
    ids = torch.tensor([[7, 20, 8, 7, 20, 9, 7, 20]])
    # t=7 `20` after `7`: runs `7 20` at 1->2 and 4->5 (length 2, kind 1): the latest, 5
    target, kind = _targets(ids)
    assert (target[7], kind[7]) == (5, 1)
    # a longer run beats a later shorter one: `8 7 20` (length 3, kind 2) occurs only at 0-2 -> 3, while
    # the later `7 20` at 5-6 has only 2
    ids = torch.tensor([[8, 7, 20, 4, 9, 7, 20, 11, 8, 7, 20]])
    target, kind = _targets(ids)
    assert (target[10], kind[10]) == (3, 2)


def test_the_exhausted_pointer_over_whole_sequences_equals_reading_token_by_token():
    generator = torch.Generator().manual_seed(0)
    past = 0
    for _ in range(50):
        ids = torch.randint(2, 10, (4, 40), generator=generator)  # 2, 3 end; 5 old; 6 new; the rest text
        state, expected = ResumeState.empty(4), []
        for t in range(ids.shape[1]):
            advance_resume(state, ids[:, t], t, ids, torch.ones(4, dtype=torch.bool), (OLD, NEW, ENDS))
            expected.append(state.exhausted())
        _, _, exhausted = edit_resume_pointer(ids, OLD, NEW, ENDS, with_exhausted=True)
        assert torch.equal(exhausted, torch.stack(expected, 1))
        past += int(exhausted.sum())
    assert past > 100  # the pointer was past old_string often enough for the comparison to mean something
    # an empty old_string: past its end from `new` on
    _, _, exhausted = edit_resume_pointer(torch.tensor([[5, 6, 9, 9, 2, 9]]), OLD, NEW, ENDS, with_exhausted=True)
    assert exhausted.tolist() == [[False, True, True, True, False, False]]


def test_three_term_mixture_by_hand():
    # vocabulary of 4, uniform logits; gate logit 0; lookup logit log 2; weights softmax(0, 0, log 2) =
    # (1/4, 1/4, 1/2); copy attention all on id 1; lookup writes id 3
    logp = lookup_mixture_log_probs(torch.zeros(4), torch.tensor(0.0), torch.tensor([1.0]), torch.tensor([1]),
                                    torch.tensor(math.log(2.0)), torch.tensor(3))
    expected = torch.tensor([1 / 16, 1 / 16 + 1 / 4, 1 / 16, 1 / 16 + 1 / 2])
    torch.testing.assert_close(logp.exp(), expected)


def test_no_target_is_the_two_term_mixture_and_its_gradient_is_finite():
    from bugfix_rl.policy.copy_head import mixture_log_probs

    logits = torch.randn(5, 7, generator=torch.Generator().manual_seed(0), requires_grad=True)
    gate = torch.randn(5, requires_grad=True)
    lookup_logit = torch.tensor([float("-inf"), 0.5, float("-inf"), 1.0, float("-inf")], requires_grad=True)
    attention = torch.softmax(torch.randn(5, 4), -1)
    context = torch.randint(0, 7, (5, 4))
    mixed = lookup_mixture_log_probs(logits, gate, attention, context, lookup_logit, torch.tensor([0, 1, 2, 3, 4]))
    two_term = mixture_log_probs(logits, gate, attention, context)
    torch.testing.assert_close(mixed[[0, 2, 4]], two_term[[0, 2, 4]])
    torch.testing.assert_close(mixed.exp().sum(-1), torch.ones(5))
    mixed.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (logits, gate))
    assert torch.isfinite(lookup_logit.grad).all()


def _lookup_agent(oov_slots: int = 0, **switches) -> TinyAgent:
    """A lookup agent of 40 words (and oov_slots slot ids after them) with random weights; switches set or
    override its config's fields."""
    torch.manual_seed(0)
    cfg = TinyAgentConfig(**{"max_len": 64, "copy_head": True, "shared_identifier_embedding": True,
                             "copy_softcap": 1.5, "copy_lookup": True, **switches})
    model = TinyAgent(40, cfg, identifier_ids=[10, 11, 12], edit_markers=(OLD, NEW, ENDS), oov_slots=oov_slots)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)  # far from the init: a real test of the two paths
    return model


@pytest.mark.parametrize("switches", [{}, {"copy_edit_resume": True, "copy_suffix_match": True},
                                      {"copy_lookup_feed": True}])
def test_cached_steps_equal_the_full_pass_with_the_lookup(switches):
    model = _lookup_agent(**switches)
    ids = torch.tensor([[9, 20, 21, 22, 2, 5, 20, 21, 22, 6, 20, 30, 22, 2, 14, 15],
                        [5, 20, 21, 22, 23, 21, 24, 6, 23, 21, 22, 23, 21, 24, 2, 9],
                        [9, 5, 10, 11, 12, 13, 6, 10, 11, 12, 13, 4, 14, 15, 16, 17]])
    torch.testing.assert_close(model(ids).exp().sum(-1), torch.ones(3, 16))
    assert_cached_steps_equal_full_pass(model, ids, [[1, 1, 1]] * ids.shape[1])
    assert_cached_steps_equal_full_pass(model, ids, ([7, 1, 8], [1, 7, 0], [3, 0, 1], [5, 8, 7]))


@pytest.mark.parametrize("shared", [True, False])
def test_the_feed_is_exact_when_the_lookup_points_at_an_episodes_new_word(shared):
    """Out-of-vocabulary slot ids (40-43: an episode's new words) as the lookup's targets: the feed embeds
    them as the model's input does (the shared identifier vector, or zeros), in both forward paths."""
    model = _lookup_agent(oov_slots=4, shared_identifier_embedding=shared, copy_lookup_feed=True)
    #                    old 40 21 41 new 40 21 ...
    ids = torch.tensor([[9, 40, 21, 41, 5, 40, 21, 41, 6, 40, 21, 42, 2, 14, 43, 15],
                        [5, 42, 21, 22, 43, 21, 24, 6, 42, 21, 22, 43, 21, 24, 2, 9]])
    torch.testing.assert_close(model(ids).exp().sum(-1), torch.ones(2, 16))
    assert_cached_steps_equal_full_pass(model, ids, [[1, 1]] * ids.shape[1])
    assert_cached_steps_equal_full_pass(model, ids, ([7, 1], [1, 7], [3, 0], [5, 8]))


def test_the_lookup_alone_writes_the_pointed_token_then_stops():
    """Vocabulary and copy attention shut out: after `new` the lookup writes old_string's tokens in order;
    once old_string is used up it has no target, and the copy attention's tokens get the mass back."""
    model = _lookup_agent()
    with torch.no_grad():
        model.copy.gate.weight.zero_()
        model.copy.gate.bias.fill_(-30.0)  # no vocabulary
        model.copy.lookup_gate.zero_()
        model.copy.kind_bias.fill_(30.0)  # the lookup wherever it has a target
    #                    0  1   2   3  4   5   6
    ids = torch.tensor([[5, 11, 12, 6, 11, 12, 9]])  # old 11 12 new 11 12 ...
    logp = model(ids)[0]
    assert logp[3, 11].exp() > 0.99 and logp[4, 12].exp() > 0.99
    # t=5: old_string used up, no lookup: the copy attention spreads over the context's ids
    assert logp[5].exp().max() < 0.9


def test_the_switch_off_leaves_every_parameter_and_output_as_it_was():
    torch.manual_seed(0)
    plain = TinyAgent(40, TinyAgentConfig(max_len=64, copy_head=True), edit_markers=(OLD, NEW, ENDS))
    torch.manual_seed(0)
    looked = TinyAgent(40, TinyAgentConfig(max_len=64, copy_head=True, copy_lookup=True),
                       edit_markers=(OLD, NEW, ENDS))
    shared = dict(looked.named_parameters())
    for name, value in plain.named_parameters():
        assert torch.equal(value, shared[name]), name
    assert set(shared) - dict(plain.named_parameters()).keys() == {"copy.lookup_gate", "copy.kind_bias"}


def test_the_feed_starts_at_zero_and_a_zero_feed_changes_no_output():
    """The feed adds one parameter, zero at first, and draws nothing (every other parameter starts as
    without it); with trained weights and a zero feed the log-probs are the same floats. (Off, the
    floats of forward and backward are the shipped bases': make bases rebuilds them tensor for tensor.)"""
    cfg = TinyAgentConfig(max_len=64, copy_head=True, copy_lookup=True)
    torch.manual_seed(0)
    plain = TinyAgent(40, cfg, edit_markers=(OLD, NEW, ENDS))
    torch.manual_seed(0)
    fed = TinyAgent(40, TinyAgentConfig(**{**cfg.__dict__, "copy_lookup_feed": True}), edit_markers=(OLD, NEW, ENDS))
    shared = dict(fed.named_parameters())
    for name, value in plain.named_parameters():
        assert torch.equal(value, shared[name]), name
    assert set(shared) - dict(plain.named_parameters()).keys() == {"copy.feed"}
    assert not fed.copy.feed.any()  # at the start the heads read h_t alone
    ids = torch.tensor([[9, 20, 21, 22, 2, 5, 20, 21, 22, 6, 20, 30, 22, 2, 14, 15]])
    plain, fed = _lookup_agent(), _lookup_agent(copy_lookup_feed=True)
    fed.load_state_dict({**plain.state_dict(), "copy.feed": torch.zeros_like(fed.copy.feed)})
    assert torch.equal(fed(ids), plain(ids))  # trained weights and a zero feed: the same floats as without it


def test_fed_hidden_adds_the_targets_projected_embedding_where_there_is_a_target():
    hidden = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    feed = torch.tensor([[0.0, 1.0], [2.0, 0.0]])  # e @ feed swaps the two features, the second doubled
    target_embedding = torch.tensor([[1.0, 1.0], [5.0, 7.0]])
    out = fed_hidden(hidden, feed, target_embedding, torch.tensor([True, False]))
    assert out.tolist() == [[1.0 + 2.0, 2.0 + 1.0], [3.0, 4.0]]


def test_the_word_head_reads_which_token_the_lookup_points_at():
    """After `new` the lookup points at old_string's tokens in order; with the feed, the word head and gates at
    each such position read h_t + e(pointed) @ feed, and a position without a target h_t alone."""
    model = _lookup_agent(copy_lookup_feed=True)
    #                    0  1   2   3  4   5   6
    ids = torch.tensor([[5, 11, 20, 6, 11, 20, 9]])  # old 11 20 new 11 20 ...
    seen = {}
    model.ln_f.register_forward_hook(lambda module, args, out: seen.update(h=out[0]))  # h_t
    model.copy.gate.register_forward_hook(lambda module, args, out: seen.update(fed=args[0][0]))  # what the heads read
    model(ids)
    h, fed_h = seen["h"], seen["fed"]
    embedding = model._embed(torch.tensor([11, 20]))
    torch.testing.assert_close(fed_h[3], h[3] + embedding[0] @ model.copy.feed)  # predicts t=4: points at 11
    torch.testing.assert_close(fed_h[4], h[4] + embedding[1] @ model.copy.feed)  # t=5: points at 20
    assert torch.equal(fed_h[0], h[0])  # `old`: no lookup target at the first token (no run of 2 yet)


def test_the_probe_sorts_the_oracles_tokens_by_kind():
    """scripts/probe_oracle.py --by-kind: the kinds of an Edit's words by hand (env words are None)."""
    from repo_scripts import load_script

    module = load_script("probe_oracle")
    words = ("<bos> listing <eoo> Edit f.py old <indent> z = max ( a ) <nl> <indent> return z "
             "new <indent> z = min ( a ) <nl> <indent> return z ; Bash pytest <eoa> ok <eoo> done <eoa>").split()
    chosen = [w not in ("<bos>", "listing", "<eoo>", "ok") for w in words]
    kinds = module.token_kinds(words, chosen)
    by_word = list(zip(words, kinds))
    assert by_word[:6] == [("<bos>", None), ("listing", None), ("<eoo>", None), ("Edit", "other"),
                           ("f.py", "other"), ("old", "other")]
    assert [k for _, k in by_word[6:8]] == ["line choice", "line choice"]  # `<indent> z`: which line
    assert {k for _, k in by_word[8:17]} == {"rest"} and by_word[17] == ("new", "old end")
    new_string = by_word[18:29]
    assert [w for w, k in new_string if k == "new changes"] == ["min"]
    assert all(k == "new copies" for w, k in new_string if w != "min")
    assert [k for _, k in by_word[29:]] == ["other", "other", "other", "other", None, None, "other", "other"]
    # an insertion: the tokens after it are still copies (difflib's alignment, not the position)
    words = "Edit f.py old for i in range ( n ) : new for i in range ( n + 1 ) : <eoa>".split()
    kinds = dict(zip(range(len(words)), module.token_kinds(words, [True] * len(words))))
    new_at = words.index("new")
    assert [words[t] for t in kinds if t > new_at and kinds[t] == "new changes"] == ["+", "1"]
    assert [kinds[t] for t in range(len(words) - 3, len(words))] == ["new copies", "new copies", "other"]
