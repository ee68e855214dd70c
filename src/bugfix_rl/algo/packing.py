"""Sequences of different lengths laid end to end in rows: behaviour cloning and the policy update.

A packed row holds several sequences one after another. TinyAgent.forward takes each token's position
in its own sequence and a segment id, and a token attends only to earlier tokens of its own segment,
so every sequence gets the values it gets alone, without being padded to the longest of its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass
class Layout:
    """Where the tokens of B right-padded sequences [B, T] lie in `rows` packed rows of `width` tokens.

    slot [B, T]: each token's index in the flattened rows (row * width + offset + t); real [B, T]: True
    for the tokens within each sequence's length."""

    slot: torch.Tensor
    real: torch.Tensor
    rows: int
    width: int

    def scatter(self, values: torch.Tensor, fill) -> torch.Tensor:
        """values [B, T] (their real tokens) laid into the packed rows -> [rows, width], `fill` elsewhere."""
        out = torch.full((self.rows * self.width,), fill, dtype=values.dtype, device=values.device)
        out[self.slot[self.real]] = values[self.real]
        return out.view(self.rows, self.width)

    def rows_of(self, T: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (within each sequence) and segments (which sequence; -1 = padding), [rows, width]."""
        B = self.slot.shape[0]
        t = torch.arange(T, device=device).expand(B, T)
        segment = torch.arange(B, device=device)[:, None].expand(B, T)
        return self.scatter(t, 0), self.scatter(segment, -1)


def layout(lengths: torch.Tensor, width: int, T: int) -> Layout:
    """first_fit of sequences with these lengths [B] (each <= T) into rows of `width` tokens; the rows
    are padded to the fullest one."""
    places, filled = first_fit(lengths.tolist(), width)
    W = max(filled)
    device = lengths.device
    t = torch.arange(T, device=device)
    row = torch.tensor([r for r, _ in places], device=device)
    offset = torch.tensor([o for _, o in places], device=device)
    slot = row[:, None] * W + offset[:, None] + t[None, :]
    return Layout(slot, t[None, :] < lengths[:, None], len(filled), W)


def packed_logits(model, ids: torch.Tensor, lengths: torch.Tensor, **forward_options) -> torch.Tensor:
    """model's logits for right-padded ids [B, T] whose row b has lengths[b] real tokens, computed on
    rows packed as tightly as the longest allows -> [B, T, V], 0 past each row's length. forward_options
    go to the model's forward (words_only)."""
    T = ids.shape[1]
    packed = layout(lengths, int(lengths.max()), T)
    positions, segments = packed.rows_of(T, ids.device)
    logits = model(packed.scatter(ids, 0), positions=positions, segments=segments, **forward_options)
    logits = logits.reshape(packed.rows * packed.width, -1)
    spare = torch.cat([logits, logits.new_zeros(1, logits.shape[1])])  # what a padded slot reads
    return spare[torch.where(packed.real, packed.slot, packed.rows * packed.width)]  # [B, T, V]
