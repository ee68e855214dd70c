"""Supervised fine-tuning on demonstrations: cross-entropy on policy (action) tokens only."""

from __future__ import annotations

import torch

from bugfix_rl.rollout.trajectory import Trajectory, collate


def sft_loss(model, batch) -> torch.Tensor:
    """Mean negative log-likelihood of the policy tokens of a collated batch."""
    logits = model(batch.ids)[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.ids[:, 1:], reduction="none")
    return (nll * batch.mask).sum() / batch.mask.sum().clamp_min(1)


def sft_train(model, demos: list[Trajectory], steps: int, lr: float, batch_size: int,
              generator: torch.Generator) -> list[float]:
    """`steps` Adam steps on minibatches drawn from `demos`; returns the loss of each step."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        pick = torch.randperm(len(demos), generator=generator)[:batch_size].tolist()
        batch = collate([demos[i] for i in pick])
        loss = sft_loss(model, batch)  # scalar
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses
