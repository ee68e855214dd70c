"""Log-prob checks shared by the policy tests (`from logprob_checks import ...`): the token-in/token-out
check, the KV-cache steps against the full pass, and a counter of the update's packed forwards."""

from __future__ import annotations

import torch

from bugfix_rl.algo.update import token_logprobs
from bugfix_rl.types import collate


def sampler_and_trainer_logprobs(model, trajectories, pad_id: int, temperature: float = 1.0):
    """(trainer, sampler) log-probs [policy tokens] of `trajectories`: the trainer's recomputation from
    the token ids beside what the sampler recorded while generating them."""
    batch = collate(trajectories, pad_id)
    with torch.no_grad():
        trainer = token_logprobs(model, batch.ids, temperature, mask=batch.mask).logp
    on = batch.mask > 0
    return trainer[on], batch.old_logp[on]


def assert_cached_steps_equal_full_pass(model, ids: torch.Tensor, chunks) -> None:
    """Feed ids [B, T] through the KV cache in ragged chunks (tokens per row per call) and compare each
    row's prediction with the full causal pass at the same position."""
    full = model(ids)  # [B, T, V]
    cache, position = model.new_cache(ids.shape[0]), [0] * ids.shape[0]
    for chunk in chunks:
        feed = torch.zeros(len(chunk), max(chunk), dtype=torch.long)
        for b, n in enumerate(chunk):
            feed[b, :n] = ids[b, position[b]:position[b] + n]
        out = model.forward_step(feed, torch.tensor(chunk), cache)
        for b, n in enumerate(chunk):
            position[b] += n
            if n:
                torch.testing.assert_close(out[b], full[b, position[b] - 1], atol=1e-5, rtol=1e-5)


def count_packed_forwards(monkeypatch) -> list[int]:
    """Count the update's packed forwards (algo.pack_rows), so a test knows the packed path ran and not
    the padded one: calls[0] after the code under test."""
    from bugfix_rl.algo import update

    calls = [0]
    real = update.packed_logits

    def counted(*args, **options):
        calls[0] += 1
        return real(*args, **options)

    monkeypatch.setattr(update, "packed_logits", counted)
    return calls
