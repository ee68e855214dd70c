"""algo/update.py by hand on a small random TinyAgent (fast: the mutation run of update.py uses these):
the trainer's log-probs and entropy, micro-batch slicing, which rows skip the backward, the statistics
minibatch_loss reports, how many optimizer steps policy_update takes and what it reports, gap_summary."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from bugfix_rl.algo.data_parallel import row_slices
from bugfix_rl.algo.objective import AGGREGATIONS
from bugfix_rl.algo import update
from bugfix_rl.algo.update import (gap_summary, minibatch_loss, policy_update, slot_columns_left_out, token_logprobs,
                                   zero_advantage_split)
from bugfix_rl.config import AlgoConfig
from bugfix_rl.types import Batch

from test_trainer_contract import scratch_model, synthetic_batch  # noqa: E402  (same folder)


@pytest.fixture(scope="module")
def model(tokenizer):
    return scratch_model(tokenizer)


class Recorder(torch.optim.SGD):
    """SGD that counts its steps and keeps a copy of each gradient it was handed."""

    def __init__(self, params, lr=0.0):
        super().__init__(params, lr=lr)
        self.steps, self.grads = 0, []

    def step(self, closure=None):
        self.steps += 1
        self.grads.append([p.grad.clone() for group in self.param_groups for p in group["params"]])
        return super().step(closure)


# ---------------------------------------------------------------- token_logprobs


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logprobs_are_the_tempered_log_softmax_at_the_next_token(model, temperature):
    batch = synthetic_batch(model)
    out = token_logprobs(model, batch.ids, temperature)
    logp_all = torch.log_softmax(model(batch.ids)[:, :-1] / temperature, dim=-1)
    expected = logp_all.gather(-1, batch.ids[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(out.logp, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(out.entropy, -(logp_all.exp() * logp_all).sum(-1), rtol=0, atol=1e-5)
    assert out.logp.shape == batch.mask.shape and out.logp.requires_grad and not out.entropy.requires_grad


def test_entropy_carries_a_gradient_only_when_asked(model):
    batch = synthetic_batch(model)
    with_grad = token_logprobs(model, batch.ids, 1.0, with_entropy_grad=True)
    without = token_logprobs(model, batch.ids, 1.0)
    assert with_grad.entropy.requires_grad and not without.entropy.requires_grad
    torch.testing.assert_close(with_grad.entropy.detach(), without.entropy, rtol=0, atol=1e-5)


def test_a_model_with_its_own_token_logprobs_is_asked_for_them():
    calls = []

    class Chat(torch.nn.Module):
        def token_logprobs(self, ids, temperature, mask, with_entropy_grad):
            calls.append((ids, temperature, mask, with_entropy_grad))
            return "theirs"

    ids, mask = torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 2)
    assert token_logprobs(Chat(), ids, 0.5, True, mask) == "theirs"
    assert calls == [(ids, 0.5, mask, True)]


# ---------------------------------------------------------------- micro-batch slices (data_parallel.row_slices)



def _logprobs_and_grads(model, ids, lengths):
    model.zero_grad()
    out = token_logprobs(model, ids, 1.0, lengths=lengths)
    weights = torch.linspace(-1, 1, ids.numel()).view(ids.shape)[:, 1:]
    (out.logp * weights).sum().backward()
    return out, [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("packed", [False, True])
def test_leaving_the_slots_out_gives_the_full_widths_floats(model, packed, monkeypatch):
    """The update's narrow pass (the words' columns only) against the full width, bit for bit: the
    log-probs, the entropy and every gradient, at every position within each row's length."""
    ids = synthetic_batch(model, rows=8, length=24, seed=3).ids
    lengths = torch.tensor([24, 20, 13, 24, 7, 19, 24, 11]) if packed else None
    assert slot_columns_left_out(model, ids, 1.0, False) == model.oov_slots > 0
    narrow, narrow_grads = _logprobs_and_grads(model, ids, lengths)
    monkeypatch.setattr(update, "slot_columns_left_out", lambda *args: 0)
    full, full_grads = _logprobs_and_grads(model, ids, lengths)
    within = torch.arange(23)[None, :] < (torch.full((8, 1), 24) if lengths is None else lengths[:, None] - 1)
    assert torch.equal(narrow.logp[within], full.logp[within])
    assert torch.equal(narrow.entropy[within], full.entropy[within])
    assert len(narrow_grads) == len(full_grads) and all(map(torch.equal, narrow_grads, full_grads))


def test_the_full_width_where_a_slot_occurs_or_the_entropy_takes_a_gradient(model):
    ids = synthetic_batch(model, rows=2, length=8).ids
    assert slot_columns_left_out(model, ids, 1.0, False) == model.oov_slots
    with_slot = ids.clone()
    with_slot[1, 3] = model.vocab_size - 1  # an episode's out-of-vocabulary word
    assert slot_columns_left_out(model, with_slot, 1.0, False) == 0
    assert slot_columns_left_out(model, ids, 1.0, True) == 0
    assert slot_columns_left_out(model, ids, 20.0, False) == 0  # SLOT_LOGIT / 20 might not underflow


@pytest.mark.parametrize("size,expected", [
    (0, [(0, 10)]), (-1, [(0, 10)]), (10, [(0, 10)]), (11, [(0, 10)]), (1, [(i, i + 1) for i in range(10)]),
    (3, [(0, 3), (3, 6), (6, 9), (9, 12)]), (5, [(0, 5), (5, 10)]), (9, [(0, 9), (9, 18)]),
])
def test_micro_batches_slice_the_rows(model, size, expected):
    batch = synthetic_batch(model, rows=10)
    assert [(s.start, s.stop) for s in row_slices(len(batch), size)] == expected


# ---------------------------------------------------------------- zero_advantage_split


def test_zero_advantage_rows_skip_the_backward_only_without_kl_or_entropy_terms(model):
    batch = synthetic_batch(model, rows=4)
    batch.advantages = torch.tensor([0.5, 0.0, -0.5, 0.0])
    parts = zero_advantage_split(batch, AlgoConfig())
    assert [(index.tolist(), backward) for index, backward in parts] == [([0, 2], True), ([1, 3], False)]
    assert zero_advantage_split(batch, AlgoConfig(kl_coef=0.1, kl_in_reward=True))[1][1] is False
    for algo in (AlgoConfig(entropy_coef=0.01), AlgoConfig(kl_coef=0.1)):  # these terms act on every row
        assert zero_advantage_split(batch, algo) == [(slice(None), True)]
    batch.advantages = torch.tensor([0.5, 1.0, -0.5, 2.0])
    assert zero_advantage_split(batch, AlgoConfig()) == [(slice(None), True)]
    batch.advantages = torch.zeros(4)
    ((index, backward),) = zero_advantage_split(batch, AlgoConfig())
    assert index.tolist() == [0, 1, 2, 3] and backward is False


# ---------------------------------------------------------------- minibatch_loss statistics


def _loss(model, batch, algo, ref_model=None, is_weights=None):
    weights = AGGREGATIONS[algo.loss_mode](batch.mask, algo.norm_const)
    return minibatch_loss(model, batch, weights, algo, ref_model, is_weights)


def test_minibatch_loss_reports_entropy_tokens_and_gaps_over_policy_tokens(model):
    batch = synthetic_batch(model)
    batch.old_logp = batch.old_logp - 0.25 * batch.mask  # the sampler's log-probs 0.25 below the trainer's
    _, stats = _loss(model, batch, AlgoConfig())
    out = token_logprobs(model, batch.ids, 1.0)
    assert stats["tokens"] == float(batch.mask.sum())
    assert stats["entropy"] == pytest.approx(float((out.entropy * batch.mask).sum() / batch.mask.sum()), abs=1e-6)
    assert stats["logp_gap_tokens"].shape == (int(batch.mask.sum()),)
    torch.testing.assert_close(stats["logp_gap_tokens"], torch.full_like(stats["logp_gap_tokens"], 0.25), atol=1e-5,
                               rtol=0)
    assert "kl_ref" not in stats


def test_minibatch_loss_at_ratio_one_is_minus_the_weighted_advantage(model):
    """At ratio 1 the clipped term is -A per token: the loss is -sum(w * A) over policy tokens."""
    batch = synthetic_batch(model)
    algo = AlgoConfig()
    loss, _ = _loss(model, batch, algo)
    weights = AGGREGATIONS[algo.loss_mode](batch.mask, algo.norm_const)
    expected = -(weights * batch.mask * batch.advantages[:, None]).sum()
    assert float(loss.detach()) == pytest.approx(float(expected), abs=1e-6)


def test_the_kl_statistic_and_term_by_hand(model):
    batch = synthetic_batch(model)
    reference = scratch_model_like(model, seed=1)
    algo = AlgoConfig(kl_coef=0.1, kl_kind="k1")
    loss, stats = _loss(model, batch, algo, ref_model=reference)
    logp = token_logprobs(model, batch.ids, 1.0).logp.detach()
    ref = token_logprobs(reference, batch.ids, 1.0).logp.detach()
    k1 = ((logp - ref) * batch.mask).sum() / batch.mask.sum()
    assert stats["kl_ref"] == pytest.approx(float(k1), abs=1e-5)
    plain, _ = _loss(model, batch, AlgoConfig())
    weights = AGGREGATIONS[algo.loss_mode](batch.mask, algo.norm_const)
    kl_term = 0.1 * (weights * batch.mask * (logp - ref)).sum()
    assert float((loss - plain).detach()) == pytest.approx(float(kl_term), abs=1e-6)


def test_the_entropy_bonus_lowers_the_loss_by_its_weighted_entropy(model):
    batch = synthetic_batch(model)
    algo = AlgoConfig(entropy_coef=0.05)
    with_bonus, _ = _loss(model, batch, algo)
    plain, _ = _loss(model, batch, AlgoConfig())
    entropy = token_logprobs(model, batch.ids, 1.0).entropy
    weights = AGGREGATIONS[algo.loss_mode](batch.mask, algo.norm_const)
    assert float((plain - with_bonus).detach()) == pytest.approx(float(0.05 * (weights * batch.mask * entropy).sum()), abs=1e-6)


def test_importance_weights_scale_the_clipped_term_only(model):
    batch = synthetic_batch(model)
    batch.advantages = torch.linspace(0.2, 1.0, len(batch))  # one sign: the clipped term's sum is not 0
    algo = AlgoConfig()
    plain, _ = _loss(model, batch, algo)
    half, _ = _loss(model, batch, algo, is_weights=torch.full((len(batch), batch.mask.shape[1] + 3), 0.5))
    plain, half = plain.detach(), half.detach()
    assert float(half) == pytest.approx(0.5 * float(plain), abs=1e-6)
    entropy_algo = AlgoConfig(entropy_coef=0.05)
    bonus_plain, _ = _loss(model, batch, entropy_algo)
    bonus_half, _ = _loss(model, batch, entropy_algo, is_weights=torch.full_like(batch.mask, 0.5))
    assert float(bonus_half.detach() - half) == pytest.approx(float(bonus_plain.detach() - plain), abs=1e-6)  # unweighted


def scratch_model_like(model, seed: int):
    other = copy.deepcopy(model)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return other.eval()


# ---------------------------------------------------------------- policy_update


@pytest.mark.parametrize("epochs,minibatches", [(1, 1), (1, 3), (2, 2), (3, 1)])
def test_policy_update_takes_epochs_times_minibatches_steps(model, epochs, minibatches):
    learner = copy.deepcopy(model)
    optimizer = Recorder(learner.parameters())
    algo = AlgoConfig(epochs=epochs, minibatches=minibatches)
    metrics = policy_update(learner, optimizer, synthetic_batch(model, rows=12), algo, torch.Generator().manual_seed(0))
    assert optimizer.steps == epochs * minibatches
    assert metrics["skipped_steps"] == [False] * (epochs * minibatches) and metrics["nonfinite_skips"] == 0.0


def test_policy_update_reports_the_mean_clipped_gradient_norm(model):
    learner = copy.deepcopy(model)
    optimizer = Recorder(learner.parameters())
    algo = AlgoConfig(minibatches=2, max_grad_norm=1e9)
    metrics = policy_update(learner, optimizer, synthetic_batch(model, rows=8), algo, torch.Generator().manual_seed(0))
    norms = [float(torch.cat([g.flatten() for g in grads]).norm()) for grads in optimizer.grads]
    assert metrics["grad_norm"] == pytest.approx(sum(norms) / len(norms), rel=1e-5)
    assert metrics["entropy"] > 0 and metrics["approx_kl"] >= 0 and 0 <= metrics["clip_frac"] <= 1


def test_policy_update_clips_the_gradient_norm(model):
    learner = copy.deepcopy(model)
    optimizer = Recorder(learner.parameters())
    policy_update(learner, optimizer, synthetic_batch(model), AlgoConfig(minibatches=1, max_grad_norm=1e-3),
                  torch.Generator().manual_seed(0))
    (grads,) = optimizer.grads
    assert float(torch.cat([g.flatten() for g in grads]).norm()) == pytest.approx(1e-3, rel=1e-3)


def test_an_all_zero_advantage_minibatch_still_steps_with_a_zero_gradient(model):
    learner = copy.deepcopy(model)
    optimizer = Recorder(learner.parameters())
    batch = synthetic_batch(model)
    batch.advantages = torch.zeros(len(batch))
    metrics = policy_update(learner, optimizer, batch, AlgoConfig(minibatches=1), torch.Generator().manual_seed(0))
    assert optimizer.steps == 1 and all(float(g.abs().max()) == 0.0 for g in optimizer.grads[0])
    assert metrics["grad_norm"] == 0.0
    assert metrics["entropy"] > 0  # the no-grad pass still measured them


def test_policy_update_statistics_are_token_weighted_means_over_micro_batches(model):
    batch = synthetic_batch(model, rows=8)
    batch.mask[:4, 12:18] = 0.0  # rows with fewer policy tokens: a plain mean over micro-batches would differ
    def update(algo):
        learner = copy.deepcopy(model)
        return policy_update(learner, Recorder(learner.parameters()), batch, algo, torch.Generator().manual_seed(0))

    one, split = update(AlgoConfig()), update(AlgoConfig(micro_batch_size=3))
    for key in ("entropy", "approx_kl", "clip_frac"):
        assert split[key] == pytest.approx(one[key], abs=1e-6), key
    assert "tokens" not in one


def test_the_logp_gap_is_read_on_the_first_minibatch_only(model):
    batch = synthetic_batch(model, rows=8)
    batch.old_logp = batch.old_logp - 0.5 * batch.mask
    learner = copy.deepcopy(model)  # the first step moves the weights: a gap read later would differ
    metrics = policy_update(learner, Recorder(learner.parameters(), lr=0.5), batch, AlgoConfig(minibatches=2),
                            torch.Generator().manual_seed(0))
    assert metrics["logp_gap"] == pytest.approx(0.5, abs=1e-5) and metrics["logp_gap_mean"] == pytest.approx(0.5, abs=1e-5)


def test_tis_anchors_at_the_trainer_and_leaves_the_callers_old_logp(model):
    batch = synthetic_batch(model)
    mu = batch.old_logp - 0.1 * batch.mask
    batch.old_logp = mu.clone()
    learner = copy.deepcopy(model)
    metrics = policy_update(learner, Recorder(learner.parameters()), batch, AlgoConfig(tis_cap=2.0),
                            torch.Generator().manual_seed(0))
    assert torch.equal(batch.old_logp, mu)
    assert metrics["approx_kl"] == pytest.approx(0.0, abs=1e-9) and metrics["clip_frac"] == 0.0  # ratio pi / pi_old = 1
    assert metrics["logp_gap"] == pytest.approx(0.1, abs=1e-5) and "tis_truncated_frac" in metrics


# ---------------------------------------------------------------- gap_summary


def test_gap_summary_by_hand():
    values = torch.arange(1, 101, dtype=torch.float64) / 100  # 0.01 .. 1.00
    summary = gap_summary([values[:30], values[30:]])
    assert summary["logp_gap"] == pytest.approx(1.0)
    assert summary["logp_gap_mean"] == pytest.approx(0.505)
    assert summary["logp_gap_p99"] == pytest.approx(0.9901)  # linear interpolation at rank 98.01
    assert gap_summary([]) == {"logp_gap": 0.0, "logp_gap_mean": 0.0, "logp_gap_p99": 0.0}
    assert gap_summary([torch.zeros(0)]) == {"logp_gap": 0.0, "logp_gap_mean": 0.0, "logp_gap_p99": 0.0}
    assert not math.isnan(gap_summary([torch.tensor([2.0])])["logp_gap_p99"])


# ---------------------------------------------------------------- more of policy_update, by hand


def one_token_batch(model) -> Batch:
    """A batch whose only policy token is (row 0, position 20)."""
    batch = synthetic_batch(model, rows=2)
    batch.mask.zero_()
    batch.mask[0, 20] = 1.0
    batch.old_logp = token_logprobs(model, batch.ids, 1.0).logp.detach() * batch.mask
    batch.advantages = torch.tensor([1.0, 0.0])
    return batch


def test_one_policy_token_statistics_are_that_tokens(model):
    batch = one_token_batch(model)
    entropy = float(token_logprobs(model, batch.ids, 1.0).entropy[0, 20])
    reference = scratch_model_like(model, seed=2)
    _, stats = _loss(model, batch, AlgoConfig(kl_coef=0.1, kl_kind="k1"), ref_model=reference)
    k1 = float((token_logprobs(model, batch.ids, 1.0).logp[0, 20] - token_logprobs(reference, batch.ids, 1.0).logp[0, 20]).detach())
    assert stats["entropy"] == pytest.approx(entropy, abs=1e-6) and stats["kl_ref"] == pytest.approx(k1, abs=1e-6)
    learner = copy.deepcopy(model)
    metrics = policy_update(learner, Recorder(learner.parameters()), batch, AlgoConfig(minibatches=1),
                            torch.Generator().manual_seed(0))
    assert metrics["entropy"] == pytest.approx(entropy, abs=1e-6)


def test_statistics_are_the_token_weighted_mean_by_hand(model):
    batch = synthetic_batch(model, rows=4)
    batch.mask[:2, 12:18] = 0.0  # rows 0-1: 5 policy tokens, rows 2-3: 11
    learner = copy.deepcopy(model)
    metrics = policy_update(learner, Recorder(learner.parameters()), batch, AlgoConfig(minibatches=1),
                            torch.Generator().manual_seed(0))
    entropy = token_logprobs(model, batch.ids, 1.0).entropy
    assert metrics["entropy"] == pytest.approx(float((entropy * batch.mask).sum() / batch.mask.sum()), abs=1e-6)


def test_the_minibatch_order_comes_from_the_given_generator_only(model):
    batch = synthetic_batch(model, rows=8)
    batch.advantages = torch.linspace(0.1, 1.0, 8)

    def update(global_seed: int):
        torch.manual_seed(global_seed)
        learner = copy.deepcopy(model)
        optimizer = Recorder(learner.parameters())
        policy_update(learner, optimizer, batch, AlgoConfig(minibatches=4), torch.Generator().manual_seed(0))
        return optimizer.grads

    for a, b in zip(update(1)[0], update(2)[0]):
        assert torch.equal(a, b)


def test_tis_weights_scale_the_gradient_and_report_the_truncated_share(model):
    """mu twice pi_old on every token: IS weight min(1/2, C) = 0.5, so the first gradient is half the
    plain one; with C = 0.25 every token is truncated."""
    batch = synthetic_batch(model)
    batch.advantages = torch.linspace(0.2, 1.0, len(batch))

    def first_grad(algo, old_logp):
        learner = copy.deepcopy(model)
        optimizer = Recorder(learner.parameters())
        metrics = policy_update(learner, optimizer, Batch(batch.ids, batch.mask, old_logp, batch.rewards, batch.groups,
                                                          batch.advantages), algo, torch.Generator().manual_seed(0))
        return torch.cat([g.flatten() for g in optimizer.grads[0]]), metrics

    plain, _ = first_grad(AlgoConfig(minibatches=1, max_grad_norm=1e9), batch.old_logp)
    mu = batch.old_logp + math.log(2.0) * batch.mask
    half, metrics = first_grad(AlgoConfig(minibatches=1, max_grad_norm=1e9, tis_cap=2.0), mu)
    torch.testing.assert_close(half, 0.5 * plain, rtol=1e-4, atol=1e-7)
    assert metrics["tis_truncated_frac"] == 0.0
    _, capped = first_grad(AlgoConfig(minibatches=1, tis_cap=0.25), mu)
    assert capped["tis_truncated_frac"] == 1.0


def test_rows_with_zero_advantage_skip_the_backward_without_changing_the_gradient(model):
    batch = synthetic_batch(model)
    batch.advantages = torch.tensor([0.5, 0.0, -0.5, 0.0, 1.0, 0.0, -1.0, 0.25])

    def first_grad(algo):
        learner = copy.deepcopy(model)
        optimizer = Recorder(learner.parameters())
        policy_update(learner, optimizer, batch, algo, torch.Generator().manual_seed(0))
        return torch.cat([g.flatten() for g in optimizer.grads[0]])

    split = first_grad(AlgoConfig(minibatches=1, max_grad_norm=1e9))
    full = first_grad(AlgoConfig(minibatches=1, max_grad_norm=1e9, entropy_coef=1e-30))  # every row backward
    torch.testing.assert_close(split, full, rtol=1e-5, atol=1e-8)


def test_policy_update_uses_the_kl_reference_and_the_norm_const_aggregation(model):
    batch = synthetic_batch(model)
    learner = copy.deepcopy(model)
    metrics = policy_update(learner, Recorder(learner.parameters()), batch, AlgoConfig(minibatches=1, kl_coef=0.1),
                            torch.Generator().manual_seed(0), ref_model=scratch_model_like(model, seed=3))
    assert metrics["kl_ref"] > 0
    learner = copy.deepcopy(model)
    optimizer = Recorder(learner.parameters())
    policy_update(learner, optimizer, batch, AlgoConfig(minibatches=1, loss_mode="norm_const", norm_const=1000.0,
                                                        max_grad_norm=1e9), torch.Generator().manual_seed(0))
    token_mean = batch.mask.sum()
    learner2 = copy.deepcopy(model)
    plain = Recorder(learner2.parameters())
    policy_update(learner2, plain, batch, AlgoConfig(minibatches=1, max_grad_norm=1e9), torch.Generator().manual_seed(0))
    scale = float(token_mean) / 1000.0  # token_mean divides by the token count, norm_const by 1000
    torch.testing.assert_close(torch.cat([g.flatten() for g in optimizer.grads[0]]),
                               scale * torch.cat([g.flatten() for g in plain.grads[0]]), rtol=1e-3, atol=1e-8)


def test_the_entropy_bonus_has_a_gradient(model):
    batch = synthetic_batch(model)

    def grad(algo):
        learner = copy.deepcopy(model)
        loss, _ = _loss(learner, batch, algo)
        loss.backward()
        return torch.cat([p.grad.flatten() for p in learner.parameters() if p.grad is not None])

    assert not torch.allclose(grad(AlgoConfig(entropy_coef=0.5)), grad(AlgoConfig()))


def test_minibatch_loss_passes_the_mask_to_the_sequence_ratio_and_the_dual_clip_to_the_loss(model):
    from bugfix_rl.algo.objective import RATIOS, aggregate, ppo_clip_loss

    batch = synthetic_batch(model)
    batch.old_logp = batch.old_logp + 0.3 * batch.mask * torch.linspace(-2, 2, len(batch))[:, None]  # A < 0: ratio e^0.6
    algo = AlgoConfig(ratio_level="sequence", clip_low=0.1, clip_high=0.1, dual_clip=1.5)
    loss, _ = _loss(model, batch, algo)
    logp = token_logprobs(model, batch.ids, 1.0).logp
    log_ratio = RATIOS["sequence"](logp, batch.old_logp, batch.mask)
    per_token, _ = ppo_clip_loss(log_ratio, batch.advantages, batch.mask, 0.1, 0.1, 1.5)
    weights = AGGREGATIONS[algo.loss_mode](batch.mask, algo.norm_const)
    expected = aggregate(torch.where(batch.mask > 0, per_token, 0.0), weights)
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), abs=1e-6)
    no_dual, _ = _loss(model, batch, AlgoConfig(ratio_level="sequence", clip_low=0.1, clip_high=0.1))
    assert float(no_dual.detach()) != pytest.approx(float(loss.detach()), abs=1e-4)  # the dual clip binds here
