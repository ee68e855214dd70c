"""Supervised fine-tuning on demonstrations: cross-entropy on policy (action) tokens only."""

from __future__ import annotations

from typing import Callable

import torch

from bugfix_rl.rollout.trajectory import Trajectory, collate


def sft_loss(model, batch) -> torch.Tensor:
    """Mean negative log-likelihood of the policy tokens of a collated batch."""
    logits = model(batch.ids)[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.ids[:, 1:], reduction="none")
    return (nll * batch.mask).sum() / batch.mask.sum().clamp_min(1)


def sft_train(model, demos: list[Trajectory], steps: int, lr: float, batch_size: int,
              generator: torch.Generator, length_buckets: bool = False,
              on_step: Callable[[float], None] | None = None) -> list[float]:
    """`steps` Adam steps on minibatches drawn from `demos`; returns the loss of each step.

    on_step: called with each step's loss after the step (a progress bar); it must not draw random
    numbers or change torch's threads, or the result would depend on it.

    length_buckets: minibatches of demos of similar length, so a batch carries little padding (tools-env
    episodes vary 2-3x): each pass over the demos sorts them by length plus a random jitter of up to
    `jitter` tokens, cuts the order into batches and visits those in random order.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses, queue = [], []
    for _ in range(steps):
        if length_buckets:
            if not queue:
                queue = _bucketed_epoch(demos, batch_size, generator)
            pick = queue.pop()
        else:
            pick = torch.randperm(len(demos), generator=generator)[:batch_size].tolist()
        batch = collate([demos[i] for i in pick])
        loss = sft_loss(model, batch)  # scalar
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(losses[-1])
    return losses


def _bucketed_epoch(demos: list[Trajectory], batch_size: int, generator: torch.Generator,
                    jitter: float = 24.0) -> list[list[int]]:
    """One pass over `demos` as batches of similar length, in random order."""
    keys = torch.tensor([float(len(d.ids)) for d in demos]) + jitter * torch.rand(len(demos), generator=generator)
    order = keys.argsort().tolist()
    batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
