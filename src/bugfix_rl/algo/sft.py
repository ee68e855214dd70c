"""Supervised fine-tuning on demonstrations: cross-entropy on policy (action) tokens only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from bugfix_rl.rollout.trajectory import Trajectory, collate


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
    """First-fit decreasing: the longest demo first, each into the first row it fits in (a demo longer
    than row_tokens gets a row of its own); rows padded to the fullest one."""
    rows: list[list[Trajectory]] = []
    filled: list[int] = []
    for demo in sorted(demos, key=lambda d: -len(d.ids)):
        row = next((r for r, used in enumerate(filled) if used + len(demo.ids) <= row_tokens), None)
        if row is None:
            rows.append([])
            filled.append(0)
            row = len(rows) - 1
        rows[row].append(demo)
        filled[row] += len(demo.ids)
    width = max(filled)
    flat = {name: [[] for _ in rows] for name in ("ids", "positions", "segments", "targets", "mask")}
    for r, row in enumerate(rows):
        for segment, demo in enumerate(row):
            n = len(demo.ids)
            flat["ids"][r] += demo.ids
            flat["positions"][r] += range(n)
            flat["segments"][r] += [segment] * n
            flat["targets"][r] += demo.ids[1:] + [0]
            flat["mask"][r] += [float(m) for m in demo.policy_mask[1:]] + [0.0]
        pad = width - filled[r]
        for name, value in (("ids", 0), ("positions", 0), ("segments", -1), ("targets", 0), ("mask", 0.0)):
            flat[name][r] += [value] * pad
    return PackedBatch(*(torch.tensor(flat[name]) for name in ("ids", "positions", "segments", "targets")),
                       torch.tensor(flat["mask"]))


def packed_sft_loss(model, packed: PackedBatch) -> torch.Tensor:
    """sft_loss over packed rows: the same value, without padding every demo to the longest."""
    logits = model(packed.ids, positions=packed.positions, segments=packed.segments)
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), packed.targets, reduction="none")
    return (nll * packed.mask).sum() / packed.mask.sum().clamp_min(1)


def sft_train(model, demos: list[Trajectory], steps: int, lr: float, batch_size: int,
              generator: torch.Generator, length_buckets: bool = False, pack_rows: int = 0,
              on_step: Callable[[float], None] | None = None) -> list[float]:
    """`steps` Adam steps on minibatches drawn from `demos`; returns the loss of each step.

    on_step: called with each step's loss after the step (a progress bar); it must not draw random
    numbers or change torch's threads, or the result would depend on it.

    length_buckets: minibatches of demos of similar length, so a batch carries little padding (tools-env
    episodes vary 2-3x): each pass over the demos sorts them by length plus a random jitter of up to
    `jitter` tokens, cuts the order into batches and visits those in random order.

    pack_rows > 0: each minibatch is packed into rows of that many tokens (`pack`) instead of padded to
    its longest demo; the same loss (up to float summation order) at a fraction of the work when
    lengths vary. Models without a copy head only.
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
        chosen = [demos[i] for i in pick]
        loss = packed_sft_loss(model, pack(chosen, pack_rows)) if pack_rows else sft_loss(model, collate(chosen))
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
