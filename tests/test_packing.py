"""Packed behaviour cloning (algo/sft.py): demonstrations laid end to end in rows, each attending only
to itself, give the same loss, gradients and logits as one padded row per demonstration."""

from __future__ import annotations

import random

import pytest
import torch
from logprob_checks import count_packed_forwards

from bugfix_rl.algo.sft import pack, packed_sft_loss, sft_loss, sft_train
from bugfix_rl.policy.tiny import TinyAgent, TinyAgentConfig
from bugfix_rl.types import Trajectory, collate

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
    # segment = the demo's index in the minibatch, in row order (LENGTHS: 5, 17, 3, 40, 22, 9, 31)
    assert [[s for s in dict.fromkeys(row.tolist()) if s >= 0] for row in packed.segments] == [[3, 0, 2], [6, 1], [4, 5]]
    lengths = [[int((row == s).sum()) for s in dict.fromkeys(row.tolist()) if s >= 0] for row in packed.segments]
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


def test_the_updates_packed_log_probs_and_gradients_equal_the_padded_ones():
    """token_logprobs with lengths (the policy update's path for a model that takes packed rows):
    the same log-probs, entropies and gradients as one padded row per episode, on every real position."""
    from bugfix_rl.algo.update import token_logprobs

    demos = _demos()
    batch = collate(demos)
    model = _model()
    assert model.takes_packed_rows and not _model(copy_head=True).takes_packed_rows
    assert batch.lengths().tolist() == list(LENGTHS)
    results = []
    for lengths in (None, batch.lengths()):
        model.zero_grad()
        out = token_logprobs(model, batch.ids, 0.7, with_entropy_grad=True, mask=batch.mask, lengths=lengths)
        ((out.logp - 0.1 * out.entropy) * batch.mask).sum().backward()
        results.append((out, [p.grad.clone() for p in model.parameters()]))
    (padded, padded_grads), (packed, packed_grads) = results
    real = torch.arange(batch.ids.shape[1] - 1)[None, :] < (batch.lengths() - 1)[:, None]  # [B, T-1]
    torch.testing.assert_close(packed.logp[real], padded.logp[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed.entropy[real], padded.entropy[real], atol=1e-5, rtol=1e-5)
    for grad, want in zip(packed_grads, padded_grads):
        torch.testing.assert_close(grad, want, atol=1e-5, rtol=1e-4)


def test_an_update_on_packed_rows_moves_the_parameters_as_the_padded_one(monkeypatch):
    """algo.pack_rows: policy_update's forward on packed rows gives the padded update's step, up to float
    summation order (two minibatches, so the second one's forward runs on moved parameters; plain SGD,
    since Adam's first step turns any rounding in a near-zero gradient into a full-size step)."""
    import dataclasses

    from bugfix_rl.algo.update import policy_update, token_logprobs
    from bugfix_rl.config import AlgoConfig

    demos = _demos(LENGTHS * 2, seed=2)
    batch = collate(demos)
    with torch.no_grad():
        batch.old_logp = token_logprobs(_model(), batch.ids, 1.0).logp * batch.mask
    batch.advantages = torch.linspace(-1.0, 1.0, len(demos))
    moved = []
    calls = count_packed_forwards(monkeypatch)
    for pack_rows in (False, True):
        assert calls[0] == 0 or pack_rows  # the padded update never packs
        model = _model()
        algo = AlgoConfig(pack_rows=pack_rows, minibatches=2, entropy_coef=0.01, kl_coef=0.0)
        policy_update(model, torch.optim.SGD(model.parameters(), lr=0.5), dataclasses.replace(batch), algo,
                      torch.Generator().manual_seed(0))
        moved.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert calls[0] == 2  # one forward per minibatch, both packed
    assert not torch.equal(moved[0], torch.cat([p.detach().flatten() for p in _model().parameters()]))
    torch.testing.assert_close(moved[1], moved[0], atol=1e-6, rtol=1e-5)


def test_a_ddp_wrapped_tinyagent_is_packed_too(monkeypatch):
    """Under trainer.strategy=ddp the update sees the DDP wrapper: the capability is read from its module."""
    from bugfix_rl.algo.update import token_logprobs

    class Wrapper(torch.nn.Module):  # what DistributedDataParallel exposes: .module and a forward that passes kwargs
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, *args, **kwargs):
            return self.module(*args, **kwargs)

    calls = count_packed_forwards(monkeypatch)
    batch = collate(_demos())
    token_logprobs(Wrapper(_model()), batch.ids, 1.0, mask=batch.mask, lengths=batch.lengths())
    assert calls[0] == 1


def test_a_copy_head_model_clones_on_padded_rows_whatever_the_recipe_says():
    """policy.copy_head=true on the edit menu keeps the recipe's pack_rows (160): behaviour cloning then
    trains on padded rows (the same loss) instead of stopping with the model's packed-rows error."""
    demos = _demos(LENGTHS * 2, seed=3)
    losses = [sft_train(_model(copy_head=True), demos, 3, 3e-3, 8, torch.Generator().manual_seed(0), pack_rows=rows)
              for rows in (0, 64)]
    assert losses[0] == losses[1]


def test_a_copy_head_model_updates_on_padded_rows_under_the_default_pack_rows(monkeypatch):
    """algo.pack_rows is on by default; a policy that reads whole sequences (the copy head, the tools
    env's TinyAgent) runs the update's forward on padded rows, with the same step as pack_rows=false."""
    import dataclasses

    from bugfix_rl.algo.update import policy_update, token_logprobs
    from bugfix_rl.config import AlgoConfig

    assert AlgoConfig().pack_rows
    demos = _demos(LENGTHS, seed=4)
    batch = collate(demos)
    with torch.no_grad():
        batch.old_logp = token_logprobs(_model(copy_head=True), batch.ids, 1.0).logp * batch.mask
    batch.advantages = torch.linspace(-1.0, 1.0, len(demos))
    calls = count_packed_forwards(monkeypatch)
    moved = []
    for pack_rows in (True, False):
        model = _model(copy_head=True)
        policy_update(model, torch.optim.SGD(model.parameters(), lr=0.5), dataclasses.replace(batch),
                      AlgoConfig(pack_rows=pack_rows), torch.Generator().manual_seed(0))
        moved.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert calls[0] == 0
    assert torch.equal(moved[0], moved[1])


def test_the_cosine_schedule_sets_each_cloning_steps_learning_rate(monkeypatch):
    """policy.base.lr_schedule=cosine: step t of n runs at lr (1 + cos(pi t / n)) / 2, by hand for n = 4;
    constant keeps lr at every step."""
    import math

    seen = []
    real_step = torch.optim.Adam.step

    def recording_step(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recording_step)
    demos = _demos(LENGTHS * 2, seed=5)
    sft_train(_model(), demos, 4, 0.01, 4, torch.Generator().manual_seed(0), lr_schedule="cosine")
    assert seen == pytest.approx([0.01, 0.01 * (1 + math.sqrt(0.5)) / 2, 0.005, 0.01 * (1 - math.sqrt(0.5)) / 2])
    seen.clear()
    sft_train(_model(), demos, 3, 0.01, 4, torch.Generator().manual_seed(0))
    assert seen == [0.01, 0.01, 0.01]


def test_the_config_offers_the_schedules_sft_knows():
    from bugfix_rl.algo.sft import LR_SCHEDULES
    from bugfix_rl.config import CHOICES

    assert set(CHOICES["policy.base.lr_schedule"]) == set(CHOICES["policy.tools_base.lr_schedule"]) == set(LR_SCHEDULES)
    with pytest.raises(ValueError, match="valid: constant, cosine"):
        sft_train(_model(), _demos(), 1, 0.01, 4, torch.Generator().manual_seed(0), lr_schedule="linear")


def test_behaviour_cloning_gives_the_bytes_of_a_per_tensor_adam_loop():
    """sft_train's foreach Adam and gradient clipping compute what torch's default per-tensor loops do,
    bit for bit (the RL base's bytes did not move when sft_train switched to them)."""
    demos, steps = _demos(), 4
    torch.manual_seed(0)
    model = _model()
    sft_train(model, demos, steps, 3e-3, 4, torch.Generator().manual_seed(1), pack_rows=16)
    torch.manual_seed(0)
    reference = _model()
    optimizer, generator = torch.optim.Adam(reference.parameters(), lr=3e-3, foreach=False), torch.Generator().manual_seed(1)
    for _ in range(steps):
        chosen = [demos[i] for i in torch.randperm(len(demos), generator=generator)[:4].tolist()]
        loss = packed_sft_loss(reference, pack(chosen, 16))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0, foreach=False)
        optimizer.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p, q), name


def test_collate_pads_each_episode_as_row_by_row_copies_do():
    rng = random.Random(3)
    trajectories = [Trajectory([rng.randrange(1, 50) for _ in range(n)], [rng.random() < 0.3 for _ in range(n)],
                               [rng.uniform(-3, 0) for _ in range(n)], float(n % 2), n % 3, None)
                    for n in (5, 1, 9, 9, 0, 3)]
    batch = collate(trajectories, pad_id=7)
    T = 9
    for row, t in enumerate(trajectories):
        n = len(t.ids)
        assert batch.ids[row].tolist() == t.ids + [7] * (T - n)
        assert torch.equal(batch.mask[row], torch.cat([torch.tensor(t.policy_mask, dtype=torch.float), torch.zeros(T - n)])[1:])
        assert torch.equal(batch.old_logp[row], torch.cat([torch.tensor(t.sampler_logp), torch.zeros(T - n)])[1:])
    assert batch.rewards.tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0] and batch.groups.tolist() == [2, 1, 0, 0, 0, 0]


def test_collate_refuses_an_episode_whose_mask_or_log_probs_are_not_its_length():
    good = Trajectory([1, 2, 3], [False, True, True], [0.0, -1.0, -2.0], 1.0, 0, None)
    short = Trajectory([1, 2, 3], [False, True], [0.0, -1.0, -2.0], 1.0, 0, None)
    with pytest.raises(ValueError, match="3 ids has 2 mask entries"):
        collate([good, short])
