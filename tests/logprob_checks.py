"""Log-prob checks shared by the policy tests (`from logprob_checks import ...`): the token-in/token-out
check, and a counter of the update's packed forwards."""

from __future__ import annotations

import torch

from bugfix_rl.algo.update import token_logprobs
from bugfix_rl.rollout.trajectory import collate


def sampler_and_trainer_logprobs(model, trajectories, pad_id: int, temperature: float = 1.0):
    """(trainer, sampler) log-probs [policy tokens] of `trajectories`: the trainer's recomputation from
    the token ids beside what the sampler recorded while generating them."""
    batch = collate(trajectories, pad_id)
    with torch.no_grad():
        trainer = token_logprobs(model, batch.ids, temperature, mask=batch.mask).logp
    on = batch.mask > 0
    return trainer[on], batch.old_logp[on]


def count_packed_forwards(monkeypatch) -> list[int]:
    """Count the update's packed forwards (algo.pack_rows), so a test knows the packed path ran and not
    the padded one: calls[0] after the code under test."""
    from bugfix_rl.algo import update

    calls = [0]
    real = update.packed_logits

    def counted(*args):
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(update, "packed_logits", counted)
    return calls
