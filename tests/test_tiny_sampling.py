"""TinyAgent's KV-cache sampling step without a copy head: only the fed tokens are computed, and each
row's prediction equals the full causal pass."""

from __future__ import annotations

import torch
from logprob_checks import assert_cached_steps_equal_full_pass

from bugfix_rl.policy.tiny import TinyAgent, TinyAgentConfig


def _agent(copy_head: bool = False) -> TinyAgent:
    torch.manual_seed(0)
    model = TinyAgent(40, TinyAgentConfig(max_len=64, copy_head=copy_head))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)  # far from the init: a real test of the two paths
    return model


def _qkv_rows(model: TinyAgent) -> list[int]:
    """Rows each block's qkv projection sees, summed over calls: rows[0] after the code under test."""
    rows = [0]
    for block in model.blocks:
        block.qkv.register_forward_hook(lambda _m, args, _out: rows.__setitem__(0, rows[0] + args[0].shape[:-1].numel()))
    return rows


def test_cached_steps_equal_the_full_pass_with_ragged_feeds():
    model = _agent()
    ids = torch.randint(4, 40, (4, 20), generator=torch.Generator().manual_seed(1))
    assert_cached_steps_equal_full_pass(model, ids, ([5, 1, 3, 7], [1, 6, 0, 1], [0, 2, 9, 1], [6, 1, 2, 3],
                                                     [1, 0, 1, 8]))


def test_only_the_fed_tokens_are_computed():
    """A step where one row feeds an observation (7 tokens) and the others one token or none computes
    9 token rows per layer, not 4 x 7; the copy head computes the whole grid (README's tools numbers)."""
    n_new = torch.tensor([7, 1, 0, 1])
    for copy_head, per_layer in ((False, 9), (True, 28)):
        model = _agent(copy_head)
        cache = model.new_cache(4)
        model.forward_step(torch.randint(4, 40, (4, 3)), torch.tensor([3, 3, 3, 3]), cache)
        rows = _qkv_rows(model)
        model.forward_step(torch.randint(4, 40, (4, 7)), n_new, cache)
        assert rows[0] == per_layer * len(model.blocks)
        assert cache.lengths.tolist() == [10, 4, 3, 4]


def test_a_row_that_feeds_nothing_keeps_its_cache():
    model = _agent()
    cache = model.new_cache(2)
    model.forward_step(torch.randint(4, 40, (2, 5)), torch.tensor([5, 5]), cache)
    before = [k[1, :, :5].clone() for k in cache.keys + cache.values]
    model.forward_step(torch.randint(4, 40, (2, 4)), torch.tensor([4, 0]), cache)
    assert cache.lengths.tolist() == [9, 5]
    assert all(torch.equal(k[1, :, :5], b) for k, b in zip(cache.keys + cache.values, before))
    assert all(not k[1, :, 5:64].any() for k in cache.keys + cache.values)  # nothing written past its length


def test_a_step_where_no_row_feeds_anything_returns_meaningless_logits_and_keeps_the_cache():
    model = _agent()
    cache = model.new_cache(2)
    model.forward_step(torch.randint(4, 40, (2, 3)), torch.tensor([3, 2]), cache)
    keys = [k.clone() for k in cache.keys]
    logits = model.forward_step(torch.zeros(2, 1, dtype=torch.long), torch.tensor([0, 0]), cache)
    assert logits.shape == (2, 40) and torch.isfinite(logits).all()
    assert cache.lengths.tolist() == [3, 2] and all(torch.equal(a, b) for a, b in zip(cache.keys, keys))


def test_attention_for_the_fed_rows_only_gives_the_bytes_of_all_rows(monkeypatch):
    """Rows that feed nothing are left out of the attention (TinyAgent._attending); the fed rows' logits
    and cache entries are bit for bit those of a step that runs attention on every row."""
    feeds = ([5, 3, 4, 2, 5], [1, 0, 0, 6, 0], [0, 0, 1, 1, 0], [3, 0, 0, 0, 0])
    ids = torch.randint(4, 40, (5, 6), generator=torch.Generator().manual_seed(2))

    def run() -> tuple[list[torch.Tensor], object]:
        model, logits = _agent(), []
        cache = model.new_cache(5)
        for n in feeds:
            n_new = torch.tensor(n)
            logits.append(model.forward_step(ids, n_new, cache)[n_new > 0])
        return logits, cache

    attended: list[int] = []
    real_sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda q, *a, **k: attended.append(q.shape[0]) or real_sdpa(q, *a, **k))
    some_rows, some_cache = run()
    assert attended[::len(_agent().blocks)] == [5, 2, 2, 1]  # the rows each step feeds
    monkeypatch.setattr(TinyAgent, "_attending", staticmethod(lambda grid: None))
    all_rows, all_cache = run()
    assert all(torch.equal(a, b) for a, b in zip(some_rows, all_rows))
    assert torch.equal(some_cache.lengths, all_cache.lengths)
    assert all(torch.equal(a, b) for a, b in zip(some_cache.keys + some_cache.values, all_cache.keys + all_cache.values))
