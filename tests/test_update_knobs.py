"""The real updater (`policy_update`) on a real first batch of the RL base policy.

1. Gradient accumulation: the normaliser is computed once per minibatch, so micro_batch_size 0 (one
   pass over the 32-row minibatch), 16 or 8 rows gives the same parameters after a step (design
   review question 2), for every aggregation mode and with every loss term switched on.
2. Every objective knob of AlgoConfig that the updater reads changes the update (no knob is accepted
   and then ignored), and micro_batch_size is the one that must not.
3. Truncated importance sampling: the truncated fraction and the sampler gap are logged, and the ratio
   PPO clips is anchored at the trainer's pi_old, not at the sampler's mu.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from bugfix_rl.algo.update import policy_update, token_logprobs
from bugfix_rl.config import AlgoConfig, TrainConfig
from bugfix_rl.gym.envs import make_env_factory
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.tokenizer import build_tokenizer
from bugfix_rl.recipes.rl_base import make_rl_base
from bugfix_rl.run.preflight import first_batch, preflight_trainer
from bugfix_rl.types import Batch


@pytest.fixture(scope="module")
def base_and_batch():
    """The RL base in float64 and its first batch: 4 tasks x 8 episodes = 32 rows, float64."""
    torch.set_num_threads(1)  # a second thread only spin-waits on a shared 2-core machine
    tokenizer = build_tokenizer(make_tasks("all"))
    model = make_rl_base(tokenizer, TrainConfig().policy)
    make_env, _ = make_env_factory(TrainConfig().env)
    cfg = TrainConfig(algo=AlgoConfig(prompts_per_step=4))
    _, batch = first_batch(preflight_trainer(cfg, model, tokenizer, make_env), seed=0)
    as64 = Batch(batch.ids, batch.mask.double(), batch.old_logp.double(), batch.rewards.double(), batch.groups,
                 batch.advantages.double())
    assert len(as64) == 32 and (as64.advantages != 0).any()
    return model.double(), as64


def step(model, batch: Batch, algo: AlgoConfig, optimizer: str = "adam", ref_model=None):
    """A copy of `model` after one policy_update on `batch` (flattened parameters) and the metrics."""
    learner = copy.deepcopy(model)
    if optimizer == "adam":
        opt = torch.optim.Adam(learner.parameters(), lr=algo.lr)
    else:  # plain SGD: no per-parameter normalisation, so a rescaled loss shows up in the step
        opt = torch.optim.SGD(learner.parameters(), lr=algo.lr)
    if ref_model is None and algo.kl_coef > 0:
        ref_model = copy.deepcopy(model).eval()
    metrics = policy_update(learner, opt, batch, algo, torch.Generator().manual_seed(0), ref_model)
    return torch.cat([p.detach().reshape(-1) for p in learner.parameters()]), metrics


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


# ------------------------------------------------------------------------------------------------
# 1. micro_batch_size leaves the step unchanged.

ACCUMULATION_CASES = {
    "token_mean": dict(loss_mode="token_mean"),
    "seq_mean_token_mean": dict(loss_mode="seq_mean_token_mean"),
    "seq_mean_token_sum": dict(loss_mode="seq_mean_token_sum"),
    "norm_const": dict(loss_mode="norm_const", norm_const=8192.0),
}
# Every loss term at once: GSPO ratio, KL in the loss, entropy bonus, TIS, dual clip, and 2 epochs so
# that ratios leave 1 (on 16 rows, split into 8 and 4, to keep it quick).
ALL_TERMS = dict(loss_mode="seq_mean_token_mean", ratio_level="sequence", kl_coef=0.1, kl_kind="k3",
                 entropy_coef=0.01, tis_cap=2.0, tis_level="sequence", dual_clip=3.0, epochs=2, lr=0.01)


@pytest.mark.parametrize("case", sorted(ACCUMULATION_CASES))
def test_micro_batch_size_gives_the_same_parameters(base_and_batch, case):
    model, batch = base_and_batch
    algo = dataclasses.replace(AlgoConfig(), minibatches=1, **ACCUMULATION_CASES[case])  # one 32-row minibatch
    params = {size: step(model, batch, dataclasses.replace(algo, micro_batch_size=size))[0] for size in (0, 16, 8)}
    assert not torch.equal(params[0], flat(model))  # the step did something
    torch.testing.assert_close(params[16], params[0], rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(params[8], params[0], rtol=1e-9, atol=1e-12)


def test_micro_batch_size_with_every_loss_term(small_batch):
    model, batch = small_batch
    algo = dataclasses.replace(AlgoConfig(), minibatches=1, **ALL_TERMS)
    params, metrics = {}, {}
    for size in (0, 8, 4):
        params[size], metrics[size] = step(model, batch, dataclasses.replace(algo, micro_batch_size=size))
    assert metrics[0]["clip_frac"] > 0 and "kl_ref" in metrics[0]
    # float64: a wrong normaliser moves parameters by ~1e-3; summation order alone (which another test
    # in the same worker may change by leaving torch at 2 threads) moves Adam's step on near-zero
    # gradients by ~1e-12 absolute
    torch.testing.assert_close(params[8], params[0], rtol=1e-7, atol=1e-10)
    torch.testing.assert_close(params[4], params[0], rtol=1e-7, atol=1e-10)


def test_per_micro_batch_normaliser_would_change_the_step(base_and_batch):
    """The guard has teeth: token_mean inside each micro-batch (the question-2 bug) moves elsewhere."""
    from bugfix_rl.algo import update as update_module

    model, batch = base_and_batch
    algo = dataclasses.replace(AlgoConfig(), minibatches=1, micro_batch_size=8)
    right, _ = step(model, batch, algo, optimizer="sgd")
    original = update_module.minibatch_loss

    def per_micro_batch_mean(model, mb, weights, algo, ref_model=None, is_weights=None):
        local = mb.mask / mb.mask.sum().clamp_min(1.0) / 4  # mean within the micro-batch, / 4 micro-batches
        return original(model, mb, local, algo, ref_model, is_weights)

    update_module.minibatch_loss = per_micro_batch_mean
    try:
        wrong, _ = step(model, batch, algo, optimizer="sgd")
    finally:
        update_module.minibatch_loss = original
    assert not torch.allclose(wrong, right, rtol=1e-6, atol=1e-9)


# ------------------------------------------------------------------------------------------------
# 2. Every knob the updater reads changes the update.

# Baseline: 2 epochs with SGD and a large rate, so ratios leave 1 and clipping can bind in epoch 2.
KNOB_BASE = dict(epochs=2, minibatches=1, lr=2.0, max_grad_norm=1e9)
KNOB_CHANGES = {
    "temperature": dict(temperature=0.7),
    "ratio_level": dict(ratio_level="sequence"),
    "clip_low": dict(clip_low=0.01),
    "clip_high": dict(clip_high=0.01),
    "dual_clip": dict(dual_clip=1.01),
    "loss_mode=seq_mean_token_mean": dict(loss_mode="seq_mean_token_mean"),
    "loss_mode=seq_mean_token_sum": dict(loss_mode="seq_mean_token_sum"),
    "loss_mode=norm_const": dict(loss_mode="norm_const", norm_const=100.0),
    "norm_const": dict(loss_mode="norm_const", norm_const=100.0),  # vs norm_const=50 below
    "kl_coef": dict(kl_coef=0.5),
    "kl_kind": dict(kl_coef=0.5, kl_kind="k1"),  # vs k3
    "kl_in_reward": dict(kl_coef=0.5, kl_in_reward=True),  # the updater then adds no KL term
    "entropy_coef": dict(entropy_coef=0.1),
    "lr": dict(lr=1.0),
    "epochs": dict(epochs=1),
    "minibatches": dict(minibatches=2),
    "max_grad_norm": dict(max_grad_norm=0.01),
}
# The clip knobs are compared with a reference that (almost) never clips on that side: a token whose
# ratio left [0.8, 1.2] is clipped at 0.2 and at 0.01 alike, so 0.2 vs 0.01 differs only for ratios in
# between, which depends on the CPU that built the RL base; 10 (or 0.95) vs 0.01 differs for any ratio
# beyond 1.01 (below 0.99), which an SGD step at lr 2 always produces.
KNOB_REFERENCE = {"norm_const": dict(loss_mode="norm_const", norm_const=50.0), "kl_kind": dict(kl_coef=0.5),
                  "kl_in_reward": dict(kl_coef=0.5), "clip_high": dict(clip_high=10.0),
                  "clip_low": dict(clip_low=0.95)}


@pytest.fixture(scope="module")
def small_batch(base_and_batch):
    model, batch = base_and_batch
    return model, batch.rows(torch.arange(16))  # two groups of 8


@pytest.fixture(scope="module")
def knob_reference_steps(small_batch):
    """Parameters after the reference step, per reference config (computed once each)."""
    model, batch = small_batch
    cache = {}

    def reference(knob: str) -> tuple[AlgoConfig, torch.Tensor]:
        key = repr(sorted(KNOB_REFERENCE.get(knob, {}).items()))
        if key not in cache:
            base = dataclasses.replace(AlgoConfig(), **KNOB_BASE, **KNOB_REFERENCE.get(knob, {}))
            cache[key] = base, step(model, batch, base, optimizer="sgd")[0]
        return cache[key]
    return reference


@pytest.mark.parametrize("knob", sorted(KNOB_CHANGES))
def test_every_updater_knob_changes_the_step(small_batch, knob_reference_steps, knob):
    model, batch = small_batch
    base, before = knob_reference_steps(knob)
    after, _ = step(model, batch, dataclasses.replace(base, **KNOB_CHANGES[knob]), optimizer="sgd")
    assert not torch.allclose(before, after, rtol=1e-7, atol=1e-10), f"{knob} had no effect"


def test_clipping_binds_in_the_knob_baseline(small_batch):
    """The clip knobs above can only matter if ratios leave [0.8, 1.2] in epoch 2; check they do."""
    model, batch = small_batch
    _, metrics = step(model, batch, dataclasses.replace(AlgoConfig(), **KNOB_BASE), optimizer="sgd")
    assert metrics["clip_frac"] > 0


# ------------------------------------------------------------------------------------------------
# 3. Truncated importance sampling against a stale sampler.


def stale_sampler(batch: Batch, shift: float, rows: int) -> Batch:
    """The batch as if the sampler mu had given the first `rows` rows' tokens log-prob lower by `shift`."""
    old = batch.old_logp.clone()
    old[:rows] -= shift * batch.mask[:rows]
    return dataclasses.replace(batch, old_logp=old)


def test_tis_logs_truncated_fraction_and_sampler_gap(small_batch):
    model, batch = small_batch
    with torch.no_grad():
        trainer_logp = token_logprobs(model, batch.ids, 1.0).logp
    exact = dataclasses.replace(batch, old_logp=trainer_logp.detach() * batch.mask)
    stale = stale_sampler(exact, shift=1.0, rows=4)  # pi_old / mu = e > 2 on rows 0-3
    algo = dataclasses.replace(AlgoConfig(), minibatches=1, tis_cap=2.0, tis_level="token")
    _, metrics = step(model, stale, algo)
    expected = float(stale.mask[:4].sum() / stale.mask.sum())
    assert metrics["tis_truncated_frac"] == pytest.approx(expected, rel=1e-6)
    assert metrics["logp_gap"] == pytest.approx(1.0, abs=1e-9)
    _, metrics = step(model, stale, dataclasses.replace(algo, tis_level="sequence"))
    assert metrics["tis_truncated_frac"] == pytest.approx(4 / 16)
    _, metrics = step(model, exact, algo)
    assert metrics["tis_truncated_frac"] == 0.0 and metrics["logp_gap"] < 1e-9
    assert torch.equal(stale.old_logp, stale_sampler(exact, 1.0, 4).old_logp)  # the caller's batch untouched


def test_tis_anchors_the_ratio_at_pi_old(small_batch):
    """With a cap too large to bind, the step equals PPO on pi_old with per-token weights pi_old/mu.

    Without TIS the ratio pi_theta/mu = e on the stale rows is clipped at 1.2 for A > 0 and those
    tokens get no gradient; with TIS the clipped ratio is pi_theta/pi_old = 1 and they do.
    """
    model, batch = small_batch
    with torch.no_grad():
        trainer_logp = token_logprobs(model, batch.ids, 1.0).logp
    exact = dataclasses.replace(batch, old_logp=trainer_logp.detach() * batch.mask)
    stale = stale_sampler(exact, shift=1.0, rows=16)
    algo = dataclasses.replace(AlgoConfig(), minibatches=1, lr=0.5, max_grad_norm=1e9)
    with_tis, _ = step(model, stale, dataclasses.replace(algo, tis_cap=1e6), optimizer="sgd")
    # every token's weight is e: the same as the exact batch with the advantages scaled by e
    scaled = dataclasses.replace(exact, advantages=exact.advantages * torch.e)
    reference, _ = step(model, scaled, algo, optimizer="sgd")
    torch.testing.assert_close(with_tis, reference, rtol=1e-9, atol=1e-12)
    without_tis, _ = step(model, stale, algo, optimizer="sgd")
    assert not torch.allclose(without_tis, reference, rtol=1e-6, atol=1e-9)
