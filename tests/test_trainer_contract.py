"""The trainer's contract on the real update path (issue: resume with KL, NaN, exact minibatches).

- KL is taken only on policy tokens: an overflowing value at an observation position leaves the loss
  and its gradient finite.
- A step whose loss (any objective term) or gradient norm is not finite is skipped (weights and Adam's
  state untouched) and counted; algo.max_nonfinite_skips in a row stop the run with an error naming the step.
- algo.minibatches is exact: 64 rows in 12 minibatches are 12 optimizer steps, not torch.chunk's 11.
- logp_gap is the max over the whole first minibatch, not its first micro-batch.
- DAPO's overlong shaping does not inflate all-fail groups into success-sized advantages.
- The tiny sampler never picks a zero-probability token, even on a uniform draw of exactly 0.
(The resume-with-KL test is in test_train.py.)
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from bugfix_rl.algo.objective import AGGREGATIONS
from bugfix_rl.algo.update import minibatch_loss, policy_update, token_logprobs
from bugfix_rl.config import AlgoConfig
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.tiny import TinyAgentConfig, new_tiny_agent
from bugfix_rl.policy.tokenizer import build_tokenizer
from bugfix_rl.rollout.sampler import sample_token
from bugfix_rl.types import Batch


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(make_tasks("all"))


def scratch_model(tokenizer, seed: int = 0):
    torch.manual_seed(seed)
    return new_tiny_agent(tokenizer, TinyAgentConfig(max_len=64))


def synthetic_batch(model, rows: int = 8, length: int = 24, seed: int = 0) -> Batch:
    """Random episodes whose second half is the policy's, old_logp = the model's own log-probs (ratio 1),
    advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    words = model.vocab_size - getattr(model, "oov_slots", 0)  # a slot is written only by the copy head
    ids = torch.randint(4, words, (rows, length), generator=g)
    mask = torch.zeros(rows, length - 1)
    mask[:, length // 2:] = 1.0
    with torch.no_grad():
        old = token_logprobs(model, ids, 1.0).logp * mask
    advantages = torch.linspace(-1, 1, rows)
    return Batch(ids, mask, old, advantages.clone(), torch.arange(rows) // 4, advantages)


class Spiked(torch.nn.Module):
    """The model with one observation position's target token pushed to log-prob ~ -1e4."""

    def __init__(self, model, row: int, position: int, token: int):
        super().__init__()
        self.model, self.row, self.position, self.token = model, row, position, token
        self.cfg, self.vocab_size = model.cfg, model.vocab_size

    def forward(self, ids):
        logits = self.model(ids)
        spike = torch.zeros_like(logits)
        spike[self.row, self.position, self.token] = -1e4
        return logits + spike


def spiked_kl_loss(tokenizer, position: int):
    """minibatch_loss with a k3 KL term on a batch whose token at (0, position) the policy finds
    ~e^-1e4 times less likely than the reference: (the model, the loss after backward, its stats)."""
    model = scratch_model(tokenizer)
    batch = synthetic_batch(model)
    spiked = Spiked(model, 0, position, int(batch.ids[0, position + 1]))
    algo = AlgoConfig(kl_coef=0.1, kl_kind="k3", group_size=4)
    weights = AGGREGATIONS[algo.loss_mode](batch.mask, algo.norm_const)
    loss, stats = minibatch_loss(spiked, batch, weights, algo, ref_model=copy.deepcopy(model).eval())
    loss.backward()
    return model, batch, loss, stats


def test_kl_overflow_at_a_masked_position_leaves_loss_and_gradient_finite(tokenizer):
    model, batch, loss, stats = spiked_kl_loss(tokenizer, position=3)  # predicts ids[0, 4]
    assert batch.mask[0, 3] == 0  # an observation position
    assert math.isfinite(loss.item()) and math.isfinite(stats["kl_ref"])
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_kl_overflow_on_a_policy_token_is_clamped(tokenizer):
    """On a policy token, k3 is clamped as verl's low_var_kl (at most 10): finite loss and gradient."""
    model, batch, loss, _ = spiked_kl_loss(tokenizer, position=20)
    assert batch.mask[0, 20] == 1
    assert math.isfinite(loss.item())
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def poison_gradients(model):
    """Every backward leaves a NaN in the first parameter's gradient."""
    first = next(model.parameters())
    return first.register_hook(lambda grad: grad * float("nan"))


def test_a_nan_gradient_step_is_skipped_and_counted(tokenizer):
    model = scratch_model(tokenizer)
    batch = synthetic_batch(model)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    handle = poison_gradients(model)
    metrics = policy_update(model, optimizer, batch, AlgoConfig(group_size=4, minibatches=2),
                            torch.Generator().manual_seed(0))
    handle.remove()
    assert metrics["nonfinite_skips"] == 2 and metrics["skipped_steps"] == [True, True]
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))  # nothing moved
    assert not optimizer.state  # Adam's moments never saw the NaN
    metrics = policy_update(model, optimizer, batch, AlgoConfig(group_size=4, minibatches=2),
                            torch.Generator().manual_seed(0))
    assert metrics["nonfinite_skips"] == 0 and math.isfinite(metrics["grad_norm"])
    assert not all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_nonfinite_steps_in_a_row_stop_the_run_naming_the_step(tokenizer):
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.policy.build import build_policy
    from bugfix_rl.run.trainer import NonFiniteUpdate, Trainer
    from tests.conftest import small_config

    cfg = small_config(**{"policy.init": "scratch", "algo.minibatches": 2, "algo.max_nonfinite_skips": 3,
                          "algo.prompts_per_step": 2, "algo.group_size": 4,
                          "algo.entropy_coef": 0.01})  # a backward even when no group has a success
    make_env, close = make_env_factory(cfg.env)
    model = build_policy(cfg.policy, tokenizer, init="scratch")
    trainer = Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(0))
    try:
        handle = poison_gradients(model)
        row = trainer.step(0)  # 2 skipped optimizer steps: counted, not yet fatal
        assert row["nonfinite_skips"] == 2
        with pytest.raises(NonFiniteUpdate, match=r"^step 1: 3 optimizer steps in a row"):
            trainer.step(1)
        handle.remove()
    finally:
        trainer.close()
        close()


class NaNReference(torch.nn.Module):
    """A KL reference whose log-probs are NaN at one (row, position), or everywhere (row None)."""

    def __init__(self, model, row: int | None = None, position: int | None = None):
        super().__init__()
        self.model, self.row, self.position = model, row, position
        self.cfg, self.vocab_size = model.cfg, model.vocab_size

    def forward(self, ids):
        logits = self.model(ids).clone()
        if self.row is None:
            return logits * float("nan")
        logits[self.row, self.position] = float("nan")
        return logits


@pytest.mark.parametrize("kl_kind", ["k1", "k3"])
def test_a_nan_loss_with_finite_gradients_is_skipped_and_counted(tokenizer, kl_kind):
    """A NaN reference log-prob at one policy token makes the KL term, and so the loss, NaN while every
    gradient stays finite (k1's is 1, k3's clamp passes 0): the step is skipped, as a NaN gradient is."""
    model = scratch_model(tokenizer)
    batch = synthetic_batch(model)
    assert batch.mask[0, 20] == 1
    reference = NaNReference(copy.deepcopy(model).eval(), row=0, position=20)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    algo = AlgoConfig(group_size=4, minibatches=1, kl_coef=0.1, kl_kind=kl_kind)
    metrics = policy_update(model, optimizer, batch, algo, torch.Generator().manual_seed(0), reference)
    assert math.isnan(metrics["kl_ref"])  # the term is NaN ...
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)  # ... its grads not
    assert metrics["skipped_steps"] == [True] and metrics["nonfinite_skips"] == 1
    assert metrics["nonfinite_loss_skips"] == 1
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters())) and not optimizer.state
    clean = policy_update(model, optimizer, batch, algo, torch.Generator().manual_seed(0),
                          copy.deepcopy(model).eval())
    assert clean["skipped_steps"] == [False] and clean["nonfinite_loss_skips"] == 0


def test_nan_losses_in_a_row_stop_the_run_naming_the_step(tokenizer):
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.policy.build import build_policy
    from bugfix_rl.run.trainer import NonFiniteUpdate, Trainer
    from tests.conftest import small_config

    cfg = small_config(**{"policy.init": "scratch", "algo.minibatches": 2, "algo.max_nonfinite_skips": 3,
                          "algo.prompts_per_step": 2, "algo.group_size": 4, "algo.kl_coef": 0.04})
    make_env, close = make_env_factory(cfg.env)
    model = build_policy(cfg.policy, tokenizer, init="scratch")
    reference = NaNReference(copy.deepcopy(model).eval())
    trainer = Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(0), reference=reference)
    try:
        row = trainer.step(0)  # 2 skipped optimizer steps: counted, not yet fatal
        assert row["nonfinite_skips"] == 2 and row["nonfinite_loss_skips"] == 2
        with pytest.raises(NonFiniteUpdate, match=r"^step 1: 3 optimizer steps in a row had a non-finite loss"):
            trainer.step(1)
    finally:
        trainer.close()
        close()


class CountingAdam(torch.optim.Adam):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps = 0

    def step(self, closure=None):
        self.steps += 1
        return super().step(closure)


@pytest.mark.parametrize("minibatches", [12, 5, 64])
def test_minibatches_is_exact(tokenizer, minibatches):
    model = scratch_model(tokenizer)
    batch = synthetic_batch(model, rows=64, length=12)
    optimizer = CountingAdam(model.parameters(), lr=1e-3)
    policy_update(model, optimizer, batch, AlgoConfig(group_size=8, minibatches=minibatches),
                  torch.Generator().manual_seed(0))
    assert optimizer.steps == minibatches  # torch.chunk(12) of 64 rows gives 11 chunks


def test_logp_gap_covers_the_whole_first_minibatch(tokenizer):
    """A sampler/trainer gap in the first minibatch's last micro-batch is reported."""
    model = scratch_model(tokenizer)
    batch = synthetic_batch(model, rows=8)
    last_row = int(torch.randperm(8, generator=torch.Generator().manual_seed(0))[-1])  # policy_update's order
    batch.old_logp[last_row, 20] -= 0.5
    metrics = policy_update(model, torch.optim.Adam(model.parameters(), lr=0.0), batch,
                            AlgoConfig(group_size=4, minibatches=1, micro_batch_size=1),
                            torch.Generator().manual_seed(0))
    assert metrics["logp_gap"] == pytest.approx(0.5, abs=1e-4)


def test_overlong_shaping_does_not_inflate_an_all_fail_group():
    """8 failures whose lengths differ by 1-2 tokens inside the overlong buffer: before, GRPO's std
    division made their advantages +-0.7 to 2.1; now they are the penalty's own centred differences."""
    from bugfix_rl.algo.advantage_stage import compute_advantages

    algo = AlgoConfig(group_size=8, overlong_buffer=16)
    lengths = [250, 251, 250, 252, 251, 250, 252, 251]  # max_len 256: all inside the buffer
    kept = [SimpleNamespace(ids=[0] * n, reward=0.0) for n in lengths]
    batch = SimpleNamespace(rewards=torch.zeros(8))
    compute_advantages(batch, kept, algo, model_len=256)
    assert batch.advantages.abs().max() < 0.1  # a penalty step of 1/16 per token, centred
    assert batch.advantages.sum().abs() < 1e-6
    longest = torch.tensor(lengths) == 252
    assert (batch.advantages[longest] < 0).all()  # the shaping still prefers shorter episodes
    # a group with a success keeps GRPO's normalisation
    kept[0].reward = 1.0
    batch = SimpleNamespace(rewards=torch.tensor([1.0] + [0.0] * 7))
    compute_advantages(batch, kept, algo, model_len=256)
    assert batch.advantages[0] > 2.0


def test_a_uniform_draw_of_zero_never_picks_a_zero_probability_token(monkeypatch):
    logits = torch.tensor([[float("-inf"), 0.0, 1.0], [float("-inf"), float("-inf"), 2.0]])
    monkeypatch.setattr(torch, "rand", lambda *shape, generator=None: torch.zeros(*shape))
    ids, logp = sample_token(logits, 1.0, torch.Generator())
    assert ids.tolist() == [1, 2] and torch.isfinite(logp).all()
