"""Design review questions 16, 17 and 28 (issue 39): the KL(mu || pi_prox) alarm, the per-trajectory gap
filter, and the loss mask's diagnostics (mask share, entropy at observation positions). The pure
functions by hand, then through algo/update.policy_update on a small random TinyAgent."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from bugfix_rl.run.alarms import mismatch_alarm, mismatch_alarm_line
from bugfix_rl.algo.objective import (kl_sampler_proximal, mask_share, observation_positions,
                                      trajectory_gap_kept)
from bugfix_rl.algo.update import policy_update, token_logprobs
from bugfix_rl.config import AlgoConfig, ConfigError, StopConfig, TrainConfig, validate
from bugfix_rl.run.stopping import stop_reason

from test_trainer_contract import scratch_model, synthetic_batch  # noqa: E402  (same folder)
from test_update_math import Recorder  # noqa: E402


@pytest.fixture(scope="module")
def model(tokenizer):
    return scratch_model(tokenizer)


# ---------------------------------------------------------------- the pure functions by hand


def test_kl_sampler_proximal_is_the_mean_k3_by_hand():
    # r = pi_prox / mu = 2, 1, 1/2: k3 = r - 1 - log r = 1 - ln 2, 0, ln 2 - 1/2; mean = 0.5 / 3
    log_ratio = torch.tensor([math.log(2.0), 0.0, -math.log(2.0)], dtype=torch.float64)
    assert kl_sampler_proximal(log_ratio) == pytest.approx(0.5 / 3, abs=1e-12)
    assert kl_sampler_proximal(torch.zeros(5)) == 0.0 and kl_sampler_proximal(torch.zeros(0)) == 0.0
    # a constant shift c: KL(mu || pi_prox) per token = e^c - 1 - c
    assert kl_sampler_proximal(torch.full((7,), -0.5)) == pytest.approx(math.exp(-0.5) - 0.5, abs=1e-12)
    assert kl_sampler_proximal(torch.tensor([0.1, -0.1])) == pytest.approx(math.cosh(0.1) - 1, abs=1e-8)  # float32 in


def test_trajectory_gap_kept_reads_the_largest_gap_at_policy_tokens_only():
    prox = torch.tensor([[0.0, -1.0, -2.0], [0.0, -1.0, -2.0], [0.0, -1.0, -2.0], [0.0, 0.0, 0.0]])
    mu = torch.tensor([[0.0, -1.1, -2.2], [9.0, -1.0, -2.6], [0.0, -1.0, -2.0], [5.0, 5.0, 5.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    # row 0: gaps 0.1, 0.2 -> kept at 0.25; row 1: 0.6 at a policy token (9 sits off the mask) -> dropped;
    # row 2: no gap; row 3: no policy token -> kept whatever its values
    assert trajectory_gap_kept(prox, mu, mask, 0.25).tolist() == [True, False, True, True]
    assert trajectory_gap_kept(prox, mu, mask, 0.15).tolist() == [False, False, True, True]
    assert trajectory_gap_kept(prox, mu, mask, 0.6 + 1e-6).tolist() == [True, True, True, True]


def test_mask_share_and_observation_positions_by_hand():
    # two rows of 6 ids -> 5 predicted positions; row 0 is 6 long (5 real positions, 2 policy),
    # row 1 is 4 long (3 real positions, 1 policy; positions 3-4 are padding, one wrongly marked)
    mask = torch.tensor([[0.0, 0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0, 1.0]])
    lengths = torch.tensor([6, 4])
    assert mask_share(mask, lengths) == pytest.approx(3 / 8)
    assert observation_positions(mask, lengths).tolist() == [[True, True, False, False, True],
                                                             [True, False, True, False, False]]


# ---------------------------------------------------------------- through policy_update


def update(model, batch, **algo):
    learner = copy.deepcopy(model)
    optimizer = Recorder(learner.parameters(), lr=0.5)
    metrics = policy_update(learner, optimizer, batch, AlgoConfig(**algo), torch.Generator().manual_seed(0))
    return metrics, learner


@pytest.mark.parametrize("algo", [{}, {"tis_cap": 2.0}, {"max_traj_gap": 10.0}], ids=["first-minibatch", "tis", "filter"])
def test_kl_mu_prox_is_logged_on_the_tokens_before_any_step(model, algo):
    """mu = pi_prox + 0.5 at every policy token: KL(mu || pi_prox) per token = e^-0.5 - 1 + 0.5 = 0.1065,
    read before the first optimizer step (lr 0.5 would move it) without TIS, over the batch with it."""
    batch = synthetic_batch(model)
    batch.old_logp = batch.old_logp + 0.5 * batch.mask
    metrics, _ = update(model, batch, **algo)
    assert metrics["kl_mu_prox"] == pytest.approx(math.exp(-0.5) - 0.5, abs=1e-5)
    same, _ = update(model, synthetic_batch(model), **algo)  # sampler = trainer: 0 up to float noise
    assert same["kl_mu_prox"] == pytest.approx(0.0, abs=1e-9)


def test_the_gap_filter_drops_exactly_the_episodes_past_the_bound(model):
    """Rows 1 and 5 sampled with log-probs 1.0 above the trainer's at one policy token: with the bound
    0.5 they leave the loss. The update then equals one on the same batch with their policy tokens
    masked by hand and no filter; gap_filtered counts 2; the caller's mask is left as it was."""
    batch = synthetic_batch(model)
    for row in (1, 5):
        batch.old_logp[row, 15] += 1.0
    before = batch.mask.clone()
    metrics, filtered = update(model, batch, max_traj_gap=0.5, minibatches=1)
    assert metrics["gap_filtered"] == 2 and torch.equal(batch.mask, before)
    by_hand = dataclasses.replace(batch, mask=batch.mask.clone())
    by_hand.mask[[1, 5]] = 0.0
    _, expected = update(model, by_hand, minibatches=1)
    for (name, a), (_, b) in zip(filtered.named_parameters(), expected.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)
    _, unfiltered = update(model, batch, minibatches=1)  # without the filter the two rows move the weights
    assert any(not torch.allclose(a, b, atol=1e-6) for a, b in zip(unfiltered.parameters(), expected.parameters()))
    assert "gap_filtered" not in update(model, batch, minibatches=1)[0]  # off: not logged
    assert update(model, batch, max_traj_gap=1.5, minibatches=1)[0]["gap_filtered"] == 0


class Sharpened(torch.nn.Module):
    """The model with its logits x20 at the first 12 predicted positions (the observation positions of
    synthetic_batch): a near-deterministic prediction there, a near-uniform one at the policy tokens."""

    def __init__(self, model):
        super().__init__()
        self.model, self.cfg, self.vocab_size = model, model.cfg, model.vocab_size

    def forward(self, ids):
        logits = self.model(ids)
        scale = torch.ones(ids.shape[1], 1)
        scale[:12] = 20.0
        return logits * scale


def test_mask_share_and_observation_entropy_in_the_step_metrics(model):
    """synthetic_batch: 24 ids (23 predicted positions), the last 11 the policy's: mask share 11/23;
    obs_entropy is the mean entropy of the model at the 12 other positions (one epoch, one minibatch:
    the pass that measures it runs before the step), not the policy tokens' `entropy`."""
    sharp = Sharpened(model)
    batch = synthetic_batch(sharp)
    metrics, _ = update(sharp, batch, minibatches=1)
    assert metrics["mask_share"] == pytest.approx(11 / 23)
    with torch.no_grad():
        entropy = token_logprobs(sharp, batch.ids, 1.0).entropy  # [B, 23]
    assert metrics["obs_entropy"] == pytest.approx(float(entropy[:, :12].mean()), abs=1e-5)
    assert metrics["entropy"] == pytest.approx(float(entropy[:, 12:].mean()), abs=1e-5)
    assert metrics["obs_entropy"] < 0.5 * metrics["entropy"]
    padded = dataclasses.replace(batch, ids=batch.ids.clone(), mask=batch.mask.clone())
    padded.ids[:4, 20:] = padded.pad_id  # 4 rows end at 20 ids: 3 padding positions each leave both shares
    padded.mask[:4, 19:] = 0.0
    assert update(sharp, padded, minibatches=1)[0]["mask_share"] == pytest.approx((8 * 11 - 4 * 4) / (8 * 23 - 4 * 4))


# ---------------------------------------------------------------- the alarm and its stop rule


def test_the_mismatch_alarm_fires_past_the_threshold_and_can_stop_the_run():
    assert mismatch_alarm({"kl_mu_prox": 0.02}, 0.01) == {"kl_mu_prox_alarm": 1.0}
    assert mismatch_alarm({"kl_mu_prox": 0.01}, 0.01) == {"kl_mu_prox_alarm": 0.0}  # at it: not past it
    assert mismatch_alarm({"kl_mu_prox": 5.0}, 0.0) == {"kl_mu_prox_alarm": 0.0}  # 0 = no alarm
    assert mismatch_alarm({}, 0.01) == {"kl_mu_prox_alarm": 0.0}
    row = {"step": 7, "kl_mu_prox": 0.02, "kl_mu_prox_alarm": 1.0}
    assert "step 7" in mismatch_alarm_line(row, 0.01) and "0.02" in mismatch_alarm_line(row, 0.01)
    assert stop_reason(StopConfig(), {}, [row], False) is None  # warns only by default
    reason = stop_reason(StopConfig(kl_mu_prox_stop=True), {}, [row], False)
    assert reason.startswith("sampler-policy mismatch") and "kl_mu_prox_stop" in reason


@pytest.mark.parametrize("key,value", [("algo.max_traj_gap", -0.1), ("stop.kl_mu_prox_max", -1.0)])
def test_bad_settings_are_config_errors(key, value):
    cfg = TrainConfig()
    group, name = key.split(".")
    setattr(getattr(cfg, group), name, value)
    with pytest.raises(ConfigError, match=name):
        validate(cfg)


def test_a_stale_run_logs_the_mismatch_warns_and_stops_when_asked(tmp_path):
    """+exp=smoke with one step of staleness (rollout.max_staleness=1, algo.tis_cap=2), the alarm at
    0.005: step 0 is sampled by the trainer's own weights (KL ~1e-14), step 1 by weights one update old
    (0.013 on this seed), so the alarm turns on at step 1, says so on stderr, and with
    stop.kl_mu_prox_stop=true ends the run at step 2. Every row has q28's two diagnostics."""
    import json

    from in_process import cli_result

    result = cli_result("train", "+exp=smoke", "steps=4", "preflight=false", "threads=1", "eval.test=false",
                        "rollout.max_staleness=1", "algo.tis_cap=2", "stop.kl_mu_prox_max=0.005",
                        "stop.kl_mu_prox_stop=true", "logger.console=false", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["kl_mu_prox_alarm"] for row in rows] == [0.0, 1.0]
    assert rows[0]["kl_mu_prox"] < 1e-9 < 0.005 < rows[1]["kl_mu_prox"]
    assert result.stderr.count("warning: the sampler and the trainer's policy disagree at step 1") == 1
    assert all(0 < row["mask_share"] < 1 and row["obs_entropy"] > 0 for row in rows)
    out = json.loads((tmp_path / "eval.json").read_text())
    assert out["stop"]["stopped_at"] == 2 and out["stop"]["reason"].startswith("sampler-policy mismatch")
    assert out["train"]["kl_mu_prox_alarm_steps"] == [1]
