"""Data parallelism for the policy update: each rank trains on its share of every minibatch.

Every rank holds the same batch (rank 0 samples it and broadcasts it: run/learner.py), draws the same
minibatch permutation, and computes the aggregation weights over the whole minibatch before its rows
are shared out. The loss normaliser is therefore global across ranks and micro-batches (design-review
question 2), and the gradients summed over ranks (not averaged) are the one-process gradient: N ranks
give the same update as one, up to the order of the floating-point sums.

Collectives fire inside backward (DDP's reducer, FSDP2's reduce-scatter) and inside FSDP2's forward
(the all-gather of each unit's weights), so every rank runs the same passes per optimizer step: the
ranks' shares are cut into the same number of micro-batches, a rank short of rows runs one row at
weight 0 (exactly zero gradient), and the one-process update's zero-advantage backward skip is off.
Gradients are synchronised on each rank's last micro-batch only (DDP's no_sync, FSDP2's
set_requires_gradient_sync), as gradient accumulation with these engines does.

`ddp` (TinyAgent): every rank holds the whole model; DistributedDataParallel sums the gradients.
`fsdp` (Qwen3): FSDP2's fully_shard on each unit the policy names (`shard_units()`, e.g. the decoder
layers) and on the policy itself; each rank keeps 1/N of the weights, gradients and Adam moments.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Part:
    """One micro-batch of a rank's share of a minibatch.

    index: rows of the minibatch (a slice or an index tensor); dummy: the rank had no rows left, so
    `index` is one row whose weight is 0 (it runs only to keep the collectives in step); last: the
    last micro-batch of the optimizer step (its backward synchronises the gradients)."""

    index: torch.Tensor | slice
    dummy: bool
    last: bool


def row_slices(n_rows: int, size: int) -> list[slice]:
    """Consecutive slices of at most `size` rows (size 0: one slice of all of them)."""
    if size <= 0 or size >= n_rows:
        return [slice(0, n_rows)]
    return [slice(start, start + size) for start in range(0, n_rows, size)]


class SingleProcess:
    """The whole minibatch in this process: micro-batches as configured, and rows with advantage 0
    skip their backward (update.zero_advantage_split)."""

    rank, world_size = 0, 1

    def wrap(self, model):
        return model

    def parts(self, n_rows: int, size: int) -> list[Part]:
        bounds = row_slices(n_rows, size)
        return [Part(b, False, i == len(bounds) - 1) for i, b in enumerate(bounds)]

    def skips_zero_advantage_rows(self) -> bool:
        return True

    def synchronising(self, model, sync: bool):
        """Context for one micro-batch's forward and backward: its gradients meet the other ranks'
        only if `sync` (the optimizer step's last micro-batch); until then they accumulate locally."""
        return nullcontext()

    def clip(self, params, max_norm: float) -> float:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))

    def all_ranks(self, flag: bool) -> bool:
        """True iff `flag` holds on every rank (here: this one)."""
        return flag

    def gather_stats(self, sums: dict, token_total: float, tensors: list[list[torch.Tensor]]):
        """Token-weighted stat sums, token total and per-token stat tensors, over every rank."""
        return sums, token_total, tensors


class DataParallel(SingleProcess):
    """Rank `rank` of `world_size` in the default process group (gloo on CPU, nccl on GPU)."""

    def __init__(self, strategy: str):
        if strategy not in ("ddp", "fsdp"):
            raise ValueError(f"unknown data-parallel strategy {strategy!r} (ddp | fsdp)")
        self.strategy = strategy
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def wrap(self, model):
        """The module the update runs forward and backward through (`model` itself for fsdp, sharded in
        place; its optimizer must be made afterwards, over the sharded parameters)."""
        if self.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            wrapped = DistributedDataParallel(model, forward_sync_buffers=False)
            wrapped.register_comm_hook(None, _sum_hook)  # the loss is already globally normalised
            return wrapped
        from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

        units = list(getattr(model, "shard_units", lambda: [])())
        for unit in units:
            fully_shard(unit)
        fully_shard(model)
        for unit in units + [model]:  # each FSDP module keeps its own reduction settings
            unit.set_gradient_divide_factor(1.0)  # sum, as for ddp
            unit.set_force_sum_reduction_for_comms(True)  # a plain SUM: gloo has no PREMUL_SUM
        if hasattr(model, "token_logprobs"):  # the update's forward is this method, not forward()
            register_fsdp_forward_method(model, "token_logprobs")
        return model

    def parts(self, n_rows: int, size: int) -> list[Part]:
        share = torch.arange(n_rows).tensor_split(self.world_size)[self.rank]
        most = math.ceil(n_rows / self.world_size)  # the largest share: it sets every rank's count
        count = 1 if size <= 0 else max(1, math.ceil(most / size))
        pieces = share.tensor_split(count)
        return [Part(p if len(p) else torch.zeros(1, dtype=torch.long), not len(p), i == count - 1)
                for i, p in enumerate(pieces)]

    def skips_zero_advantage_rows(self) -> bool:
        return False

    def synchronising(self, model, sync: bool):
        if self.strategy == "ddp":
            return nullcontext() if sync else model.no_sync()
        model.set_requires_gradient_sync(sync)
        return nullcontext()

    def clip(self, params, max_norm: float) -> float:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def all_ranks(self, flag: bool) -> bool:
        # a CUDA tensor only where the backend is nccl alone ("auto" pairs gloo for CPU tensors with it)
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        value = torch.tensor([float(flag)], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MIN)
        return bool(value.item() > 0)

    def gather_stats(self, sums: dict, token_total: float, tensors: list[list[torch.Tensor]]):
        # Objects, not a reduced tensor: a rank that ran only zero-weight rows has no statistics at all,
        # and this works on any backend (nccl reduces CUDA tensors only).
        gathered = [None] * self.world_size
        dist.all_gather_object(gathered, (sums, token_total, [[t.cpu() for t in group] for group in tensors]))
        merged_sums: dict[str, float] = {}
        for rank_sums, _, _ in gathered:
            for key, value in rank_sums.items():
                merged_sums[key] = merged_sums.get(key, 0.0) + value
        merged = [[t for _, _, rank in gathered for t in rank[i]] for i in range(len(tensors))]
        return merged_sums, sum(total for _, total, _ in gathered), merged


def _sum_hook(state, bucket):
    """DDP communication hook: the sum of the ranks' gradients (DDP's default divides by N)."""
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0])


def full_state_dict(model) -> dict[str, torch.Tensor]:
    """The model's whole state dict on every rank (FSDP2's shards gathered; a DDP wrapper unwrapped)."""
    module = getattr(model, "module", model)
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in module.state_dict().items()}
