"""Packed behaviour cloning (algo/sft.py): demonstrations laid end to end in rows, each attending only
to itself, give the same loss, gradients and logits as one padded row per demonstration."""

from __future__ import annotations

import random

import pytest
import torch

from bugfix_rl.algo.sft import pack, packed_sft_loss, sft_loss, sft_train
from bugfix_rl.policy.tiny import TinyAgent, TinyAgentConfig
from bugfix_rl.rollout.trajectory import Trajectory, collate

LENGTHS = (5, 17, 3, 40, 22, 9, 31)


def _demos(lengths=LENGTHS, seed: int = 0) -> list[Trajectory]:
    rng = random.Random(seed)
    return [Trajectory([rng.randrange(1, 50) for _ in range(n)], [rng.random() < 0.4 for _ in range(n)],
                       [0.0] * n, 0.0, 0, None) for n in lengths]


def _model(**overrides) -> TinyAgent:
    torch.manual_seed(0)
    return TinyAgent(50, TinyAgentConfig(max_len=64, **overrides))


def test_first_fit_decreasing_by_hand():
    # longest first, each into the first row with room for it, rows of 48 tokens:
    # 40 -> row 0; 31 -> row 1; 22 -> row 2 (48 - 31 = 17 left in row 1); 17 -> row 1 (full);
    # 9 -> row 2 (31); 5 -> row 0 (45); 3 -> row 0 (48)
    demos = _demos()
    packed = pack(demos, 48)
    assert packed.ids.shape == (3, 48)
    assert [sorted(set(row.tolist()) - {-1}) for row in packed.segments] == [[0, 1, 2], [0, 1], [0, 1]]
    lengths = [[int((row == s).sum()) for s in range(3) if (row == s).any()] for row in packed.segments]
    assert lengths == [[40, 5, 3], [31, 17], [22, 9]]
    assert (packed.segments[2, 31:] == -1).all() and (packed.mask[2, 31:] == 0).all()
    # positions restart at 0 in every demo; a demo's last token has no target
    assert packed.positions[0, 40:45].tolist() == [0, 1, 2, 3, 4]
    five = demos[0]
    assert packed.ids[0, 40:45].tolist() == five.ids
    assert packed.targets[0, 40:44].tolist() == five.ids[1:]
    assert packed.mask[0, 40:45].tolist() == [float(m) for m in five.policy_mask[1:]] + [0.0]


def test_a_demo_longer_than_a_row_gets_a_row_of_its_own():
    packed = pack(_demos((60, 10, 12)), 32)
    assert packed.ids.shape == (2, 60)
    assert int((packed.segments[0] == 0).sum()) == 60 and (packed.segments[1, :22] >= 0).all()


def test_packed_loss_and_gradients_equal_the_padded_batchs():
    demos = _demos()
    model = _model()
    padded = sft_loss(model, collate(demos))
    padded.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    packed = packed_sft_loss(model, pack(demos, 48))
    packed.backward()
    assert torch.allclose(packed, padded, atol=1e-6)
    for grad, want in zip((p.grad for p in model.parameters()), expected):
        torch.testing.assert_close(grad, want, atol=1e-6, rtol=1e-4)


def test_each_packed_demo_gets_the_logits_it_gets_alone():
    demos = _demos()
    model = _model()
    packed = pack(demos, 48)
    with torch.no_grad():
        logits = model(packed.ids, positions=packed.positions, segments=packed.segments)
        for row in range(packed.ids.shape[0]):
            for segment in set(packed.segments[row].tolist()) - {-1}:
                where = packed.segments[row] == segment
                alone = model(packed.ids[row, where][None])[0]
                torch.testing.assert_close(logits[row, where], alone, atol=1e-5, rtol=1e-5)


def test_packed_behaviour_cloning_follows_the_padded_one():
    """Same minibatches, same loss up to float summation order: the two runs' losses stay close."""
    demos = _demos(LENGTHS * 4, seed=1)
    losses = []
    for pack_rows in (0, 64):
        model = _model()
        losses.append(sft_train(model, demos, 5, 3e-3, 8, torch.Generator().manual_seed(0), pack_rows=pack_rows))
    assert losses[0][0] == pytest.approx(losses[1][0], abs=1e-6)
    assert losses[0] == pytest.approx(losses[1], abs=1e-4)


def test_a_copy_head_takes_no_packed_rows():
    model = _model(copy_head=True)
    packed = pack(_demos(), 48)
    with pytest.raises(ValueError, match="copy head"):
        model(packed.ids, positions=packed.positions, segments=packed.segments)
