"""Sequences of different lengths laid end to end in rows: behaviour cloning and the policy update.

A packed row holds several sequences one after another. TinyAgent.forward takes each token's position
in its own sequence and a segment id, and a token attends only to earlier tokens of its own segment,
so every sequence gets the values it gets alone, without being padded to the longest of its batch.
"""

from __future__ import annotations

import torch


def first_fit(lengths: list[int], width: int) -> tuple[list[tuple[int, int]], list[int]]:
    """First-fit decreasing: the longest sequence first (ties in the given order), each into the first
    row with room for it; one longer than `width` gets a row of its own. Returns each sequence's
    (row, offset) and each row's filled length."""
    places: list[tuple[int, int]] = [(0, 0)] * len(lengths)
    filled: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, used in enumerate(filled) if used + lengths[i] <= width), None)
        if row is None:
            filled.append(0)
            row = len(filled) - 1
        places[i] = (row, filled[row])
        filled[row] += lengths[i]
    return places, filled


def packed_logits(model, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """model's logits for right-padded ids [B, T] whose row b has lengths[b] real tokens, computed on
    rows packed as tightly as the longest allows -> [B, T, V], 0 past each row's length."""
    B, T = ids.shape
    places, filled = first_fit(lengths.tolist(), int(lengths.max()))
    R, W = len(filled), max(filled)
    device = ids.device
    t = torch.arange(T, device=device)
    real = t[None, :] < lengths[:, None]  # [B, T]
    row = torch.tensor([r for r, _ in places], device=device)
    offset = torch.tensor([o for _, o in places], device=device)
    slot = row[:, None] * W + offset[:, None] + t[None, :]  # [B, T]: where each token lies in the packed rows
    slots = slot[real]
    packed_ids = torch.zeros(R * W, dtype=ids.dtype, device=device)
    packed_ids[slots] = ids[real]
    positions = torch.zeros(R * W, dtype=torch.long, device=device)
    positions[slots] = t.expand(B, T)[real]
    segments = torch.full((R * W,), -1, dtype=torch.long, device=device)
    segments[slots] = torch.arange(B, device=device)[:, None].expand(B, T)[real]
    logits = model(packed_ids.view(R, W), positions=positions.view(R, W), segments=segments.view(R, W))
    logits = logits.reshape(R * W, -1)
    spare = torch.cat([logits, logits.new_zeros(1, logits.shape[1])])  # row R*W: what a padded slot reads
    return spare[torch.where(real, slot, R * W)]  # [B, T, V]
