"""Supervised fine-tuning on demonstrations: cross-entropy on policy (action) tokens only."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from bugfix_rl.algo.packing import layout
from bugfix_rl.types import Trajectory, collate


def sft_loss(model, batch) -> torch.Tensor:
    """Mean negative log-likelihood of the policy tokens of a collated batch."""
    logits = model(batch.ids)[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.ids[:, 1:], reduction="none")
    return (nll * batch.mask).sum() / batch.mask.sum().clamp_min(1)


@dataclass
class PackedBatch:
    """Demonstrations laid end to end in rows, each attending only within itself (TinyAgent.forward).

    ids, positions (within its demonstration), segments (which demonstration of the row; -1 =
    padding), targets (the next token of the same demonstration): [R, W] long; mask: [R, W] float, 1
    where the target is a policy token. The loss over it equals sft_loss over the padded batch.
    """

    ids: torch.Tensor
    positions: torch.Tensor
    segments: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor


def pack(demos: list[Trajectory], row_tokens: int) -> PackedBatch:
    """The demos in rows of row_tokens tokens by first-fit decreasing (algo/packing.py; a demo longer
    than row_tokens gets a row of its own); rows padded to the fullest one."""
    batch = collate(demos)  # ids [B, T], mask [B, T-1]; pad id 0
    T = batch.ids.shape[1]
    packed = layout(torch.tensor([len(d.ids) for d in demos]), row_tokens, T)
    positions, segments = packed.rows_of(T, batch.ids.device)
    last = torch.zeros(len(demos), 1)  # a demo's last token has no target
    targets = packed.scatter(torch.cat([batch.ids[:, 1:], last.long()], 1), 0)
    mask = packed.scatter(torch.cat([batch.mask, last], 1), 0.0)
    return PackedBatch(packed.scatter(batch.ids, 0), positions, segments, targets, mask)


def packed_sft_loss(model, packed: PackedBatch) -> torch.Tensor:
    """sft_loss over packed rows: the same value, without padding every demo to the longest."""
    logits = model(packed.ids, positions=packed.positions, segments=packed.segments)
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), packed.targets, reduction="none")
    return (nll * packed.mask).sum() / packed.mask.sum().clamp_min(1)


# lr_schedule -> (step t of n, counted from 0) -> the factor on lr for that step
LR_SCHEDULES: dict[str, Callable[[int, int], float]] = {
    "constant": lambda t, n: 1.0,
    "cosine": lambda t, n: 0.5 * (1.0 + math.cos(math.pi * t / n)),  # 1 at the first step, near 0 at the last
}


def sft_train(model, demos: list[Trajectory], steps: int, lr: float, batch_size: int,
              generator: torch.Generator, length_buckets: bool = False, pack_rows: int = 0,
              on_step: Callable[[float], None] | None = None, lr_schedule: str = "constant") -> list[float]:
    """`steps` Adam steps on minibatches drawn from `demos`; returns the loss of each step.

    on_step: called with each step's loss after the step (a progress bar); it must not draw random
    numbers or change torch's threads, or the result would depend on it.

    length_buckets: minibatches of demos of similar length, so a batch carries little padding (tools-env
    episodes vary 2-3x): each pass over the demos sorts them by length plus a random jitter of up to
    `jitter` tokens, cuts the order into batches and visits those in random order.

    pack_rows > 0: each minibatch is packed into rows of that many tokens (`pack`) instead of padded to
    its longest demo; the same loss (up to float summation order) at a fraction of the work when
    lengths vary. A model that does not take packed rows (a TinyAgent with a copy head) trains on
    padded rows.

    lr_schedule: a name in LR_SCHEDULES; each step's learning rate is lr times its factor.
    """
    pack_rows = pack_rows if getattr(model, "takes_packed_rows", False) else 0
    if lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule={lr_schedule!r}; valid: {', '.join(LR_SCHEDULES)}")
    schedule = LR_SCHEDULES[lr_schedule]
    # foreach: one call per update for all tensors, the same bytes as the per-tensor loop (tests/test_packing.py)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
    losses, queue = [], []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr * schedule(step, steps)
        if length_buckets:
            if not queue:
                queue = _bucketed_epoch(demos, batch_size, generator)
            pick = queue.pop()
        else:
            pick = torch.randperm(len(demos), generator=generator)[:batch_size].tolist()
        chosen = [demos[i] for i in pick]
        loss = packed_sft_loss(model, pack(chosen, pack_rows)) if pack_rows else sft_loss(model, collate(chosen))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
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
