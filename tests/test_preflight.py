"""Break-it tests: each preflight invariant fires on the very bug it guards against.

One real first batch is sampled from the cached RL base; every test breaks exactly one thing (the
batch, the sampler's temperature, a loss piece, the update, the reference) and asserts that
`check_batch` reports FAIL for that invariant. The clean batch passes all nine, `bugfix-rl preflight`
exits 0 on the defaults, and `bugfix-rl train` refuses to start on a FAIL unless told otherwise.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass

import pytest
import torch
from logprob_checks import count_packed_forwards
from omegaconf import OmegaConf

from bugfix_rl import cli
from bugfix_rl.algo import objective, update
from bugfix_rl.algo.objective import AGGREGATIONS
from bugfix_rl.algo.update import policy_update, token_logprobs
from bugfix_rl.config import TrainConfig
from bugfix_rl.gym.envs import make_env_factory
from bugfix_rl.policy.build import build_policy, build_tokenizer_for
from bugfix_rl.recipes.starting_policy import build_starting_policy
from bugfix_rl.run import preflight
from bugfix_rl.run.preflight import BOUNDS, check_batch, first_batch, preflight_trainer
from bugfix_rl.types import collate

MASK, SAMPLER, RATIO, CENTRED = ("mask = policy tokens", "sampler = trainer log-prob", "ratio = 1 before any step",
                                 "group advantage mean = 0")
PADDING, ACCUMULATED, FROZEN = ("loss invariant to padding", "accumulated = one-pass gradient",
                                "old_logp frozen in the update")
DIRECTION, KL = "update raises log pi where A > 0", "KL to reference > 0 after a step"
ANCHOR = "ratio != 1 once the policy moved"


def train_config(**algo) -> TrainConfig:
    """Defaults with interpolations resolved (the rl_base cache dir), algo fields overridden."""
    cfg = OmegaConf.to_object(OmegaConf.structured(TrainConfig))
    cfg.algo = dataclasses.replace(cfg.algo, **algo)
    return cfg


@dataclass
class FirstBatch:
    cfg: TrainConfig
    model: torch.nn.Module
    tokenizer: object
    make_env: object
    trajectories: list
    batch: object
    max_action_tokens: int


@pytest.fixture(scope="module")
def first():
    torch.set_num_threads(1)  # the machine is shared: one thread avoids oversubscription stalls
    cfg = train_config(prompts_per_step=4, group_size=8)
    tokenizer = build_tokenizer_for(cfg)
    model = build_starting_policy(cfg.policy, tokenizer)  # the RL base, from the cache
    make_env, close_env = make_env_factory(cfg.env)
    trajectories, batch = first_batch(preflight_trainer(cfg, model, tokenizer, make_env), seed=0)
    max_action_tokens = make_env(preflight.make_first_task(), None).max_action_tokens
    yield FirstBatch(cfg, model, tokenizer, make_env, trajectories, batch, max_action_tokens)
    close_env()


def batch_of(first: FirstBatch, algo=None, **kwargs):
    """first_batch through a preflight Trainer on `first`'s policy, with `algo` (default the config's)."""
    cfg = dataclasses.replace(first.cfg, algo=algo or first.cfg.algo)
    return first_batch(preflight_trainer(cfg, first.model, first.tokenizer, first.make_env), **kwargs)


def failures(first: FirstBatch, batch=None, algo=None, trajectories=None, **parts) -> set[str]:
    """Names of the checks that FAIL on (a copy of) the batch with the given parts swapped in."""
    checks = check_batch(first.model, trajectories or first.trajectories, copy.deepcopy(batch or first.batch),
                         algo or first.cfg.algo, first.tokenizer, first.max_action_tokens, **parts)
    assert set(checks) == set(BOUNDS)
    return {name for name, verdict in checks.items() if not verdict["ok"]}


def test_clean_first_batch_passes_all_nine(first):
    grouped = first.batch.advantages.view(-1, first.cfg.algo.group_size)
    assert (grouped.abs().sum(1) > 0).any(), "the batch needs a group with signal, or check 8 proves nothing"
    assert failures(first) == set()


@pytest.mark.parametrize("pack_rows", [True, False])
def test_clean_first_batch_passes_all_nine_on_packed_and_padded_rows(first, monkeypatch, pack_rows):
    """Every check runs the update's own forward (packed rows by default, padded with
    algo.pack_rows=false) and passes either way."""
    calls = count_packed_forwards(monkeypatch)
    assert failures(first, algo=dataclasses.replace(first.cfg.algo, pack_rows=pack_rows)) == set()
    assert (calls[0] > 0) == pack_rows


def test_action_mask_shifted_by_one(first):
    broken = copy.deepcopy(first.batch)
    broken.mask = torch.roll(broken.mask, shifts=1, dims=1)  # aligned with ids[:, :-1] instead of ids[:, 1:]
    assert MASK in failures(first, batch=broken)


def test_observation_tokens_in_the_mask(first):
    # a collator that marks whole episodes as policy tokens (observations and prompt included)
    everything = [dataclasses.replace(t, policy_mask=[True] * len(t.ids)) for t in first.trajectories]
    broken = collate(everything, first.tokenizer.pad_id)
    broken.advantages = first.batch.advantages.clone()
    assert MASK in failures(first, batch=broken)


def test_sampler_temperature_differs_from_trainer(first):
    hot = dataclasses.replace(first.cfg.algo, temperature=0.7)
    trajectories, batch = batch_of(first, hot, seed=0)
    assert first.cfg.algo.temperature == 1.0  # the trainer scores the episodes at 1.0
    assert failures(first, batch=batch, trajectories=trajectories) == {SAMPLER, RATIO}


def test_sequence_ratio_over_observation_tokens(first, monkeypatch):
    # GSPO's sequence log-ratio averaged over every position (observations, where old_logp is 0)
    def unmasked_sequence_ratio(logp, old_logp, mask):
        seq_mean = (logp.detach() - old_logp.detach()).mean(-1, keepdim=True)  # [B, 1]
        return seq_mean + logp - logp.detach()

    gspo = dataclasses.replace(first.cfg.algo, ratio_level="sequence")
    assert failures(first, algo=gspo) == set()  # the real GSPO ratio passes
    monkeypatch.setitem(objective.RATIOS, "sequence", unmasked_sequence_ratio)
    failed = failures(first, algo=gspo)
    assert RATIO in failed and SAMPLER not in failed


def test_advantages_not_centred(first):
    broken = copy.deepcopy(first.batch)
    broken.advantages = broken.rewards.clone()  # raw rewards used as advantages
    assert failures(first, batch=broken) == {CENTRED}


def test_padding_leaks_into_the_loss(first, monkeypatch):
    real = update.minibatch_loss

    def loss_over_every_position(model, mb, weights, algo, ref_model=None, is_weights=None):
        loss, stats = real(model, mb, weights, algo, ref_model, is_weights)
        logp = token_logprobs(model, mb.ids, algo.temperature).logp  # [B, T-1]
        return loss - 1e-3 * logp.mean(), stats  # averages pad positions in too

    monkeypatch.setattr(update, "minibatch_loss", loss_over_every_position)  # the trainer's own loss
    assert PADDING in failures(first)


def test_per_micro_batch_normaliser(first, monkeypatch):
    real = update.minibatch_loss

    def own_token_count(model, mb, weights, algo, *args):  # each micro-batch normalised by its own tokens
        return real(model, mb, AGGREGATIONS[algo.loss_mode](mb.mask, algo.norm_const), algo, *args)

    monkeypatch.setattr(update, "minibatch_loss", own_token_count)  # the trainer's own update path
    assert failures(first) == {ACCUMULATED}


def test_micro_batches_that_drop_rows(first, monkeypatch):
    from bugfix_rl.algo import data_parallel

    real = data_parallel.row_slices

    def last_rows_dropped(n_rows, size):
        parts = real(n_rows, size)
        return parts[:-1] if len(parts) > 1 else parts

    monkeypatch.setattr(data_parallel, "row_slices", last_rows_dropped)  # how the update cuts micro-batches
    assert ACCUMULATED in failures(first)


def test_advantage_stage_that_skips_the_centring(first, monkeypatch):
    from bugfix_rl.algo import advantage_stage

    def raw_rewards(batch, trajectories, algo, model_len, valid=None):
        batch.advantages = batch.rewards.clone()

    monkeypatch.setattr(advantage_stage, "compute_advantages", raw_rewards)  # the step's own advantage stage
    _, batch = batch_of(first, seed=0)
    assert CENTRED in failures(first, batch=batch)


def test_sampler_that_ignores_a_temperature_below_one(first, monkeypatch):
    """Trained at 1.0, such a sampler agrees with the trainer on the first batch; the second
    temperature preflight samples at shows it."""
    from bugfix_rl.rollout import sampler

    real = sampler.sample_token
    monkeypatch.setattr(sampler, "sample_token", lambda logits, temperature, generator: real(logits, 1.0, generator))
    _, other = batch_of(first, seed=0, temperature=0.7, tasks=1)
    assert failures(first, other_temperature=(other, 0.7)) == {SAMPLER}
    monkeypatch.undo()
    _, other = batch_of(first, seed=0, temperature=0.7, tasks=1)
    assert failures(first, other_temperature=(other, 0.7)) == set()


def test_old_logprobs_recomputed_after_the_step(first):
    def recompute_old_logp(model, optimizer, batch, algo, generator, ref_model=None):
        metrics = policy_update(model, optimizer, batch, algo, generator, ref_model)
        with torch.no_grad():
            batch.old_logp.copy_(token_logprobs(model, batch.ids, algo.temperature).logp * batch.mask)
        return metrics

    assert failures(first, update_fn=recompute_old_logp) == {FROZEN}


def test_update_pushes_the_wrong_way(first):
    def negated_advantages(model, optimizer, batch, algo, generator, ref_model=None):
        flipped = dataclasses.replace(batch, advantages=-batch.advantages)
        return policy_update(model, optimizer, flipped, algo, generator, ref_model)

    assert failures(first, update_fn=negated_advantages) == {DIRECTION}


def test_update_that_does_nothing(first):
    def no_step(model, optimizer, batch, algo, generator, ref_model=None):
        return {}

    # measured from the trainer's own log-probs, not the sampler's (whose ~1e-6 gap once let it pass); an
    # update that builds no ratio and takes no step cannot pass checks 3 and 6 either
    assert failures(first, update_fn=no_step) == {RATIO, ACCUMULATED, FROZEN, DIRECTION, KL, ANCHOR}


@pytest.mark.parametrize("tis_cap", [None, 2.0])
def test_ratio_anchored_to_the_current_policy(first, monkeypatch, tis_cap):
    """The mutation of issue 36: the ratio's denominator is the current policy (detached) instead of the
    sampler's log-probs (with tis_cap: pi_old). The ratio is 1 at every token, so clipping never acts, yet
    the gradient is the plain policy gradient: every other check passes, this one fails."""
    algo = dataclasses.replace(first.cfg.algo, tis_cap=tis_cap)
    assert failures(first, algo=algo) == set()
    monkeypatch.setattr(update, "RATIOS", {"token": lambda logp, old_logp, mask: logp - logp.detach()})
    assert failures(first, algo=algo) == {ANCHOR}


def test_reference_is_the_learner_itself(first):
    assert failures(first, make_reference=lambda learner: learner) == {KL}


# ----------------------------------------------------------------------------------------------
# The commands: `bugfix-rl preflight` exit codes, and train refusing on a FAIL.


def _canned_checks(failing: str | None) -> dict:
    return {name: {"value": 1.0 if name == failing else 0.0, "ok": name != failing, "bound": "test"}
            for name in BOUNDS}


def test_preflight_command_passes_on_defaults(tmp_path, capsys):
    cli.main(["preflight", "threads=1", f"hydra.run.dir={tmp_path}"])  # returns normally: exit code 0
    out = capsys.readouterr().out
    assert "all 11 checks hold" in out  # the ten, and the canary check (algo.canary_rate > 0 by default)
    assert all(name in out for name in BOUNDS) and preflight.CANARY in out


def test_preflight_command_exits_nonzero_on_a_fail(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(preflight, "run_preflight", lambda *args: _canned_checks(FROZEN))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["preflight", "threads=1", f"hydra.run.dir={tmp_path}"])
    assert exit_info.value.code == 1
    assert "FAIL" in capsys.readouterr().out


def test_train_refuses_to_start_on_a_failed_preflight(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(preflight, "run_preflight", lambda *args: _canned_checks(MASK))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "+exp=smoke", "threads=1", f"hydra.run.dir={tmp_path}"])
    assert exit_info.value.code == 1  # as `bugfix-rl preflight`: a failed check is a failure, not bad input
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: preflight failed: mask = policy tokens") and "\n" not in err
    assert not (tmp_path / "metrics.jsonl").exists()
    assert json.loads((tmp_path / "preflight.json").read_text())[MASK]["ok"] is False


def test_train_starts_anyway_when_allowed(tmp_path, monkeypatch):
    monkeypatch.setattr(preflight, "run_preflight", lambda *args: _canned_checks(MASK))
    cli.main(["train", "+exp=smoke", "allow_failed_preflight=true", "steps=1", "eval.test=false", "eval.n_val=1",
              "threads=1", f"hydra.run.dir={tmp_path}"])
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 1


# ------------------------------------------------------------------------------------------------
# The rollout pool's two checks (rollout.workers > 0 or rollout.max_staleness > 0).

PUBLISHED, STALE = "published weights = learner's", "stale batch gets IS weights != 1"


def _pool_checks(first: FirstBatch, pool, trajectories=None, max_staleness: int = 1) -> dict:
    algo = dataclasses.replace(first.cfg.algo, tis_cap=2.0)
    pool.set_weights(first.model, 0)
    trajectories, batch = (trajectories, first.batch) if trajectories else batch_of(
        first, algo, seed=0, pool=pool)
    return preflight.check_pool(pool, first.model, trajectories, copy.deepcopy(batch), algo, first.tokenizer,
                                max_staleness)


def test_pool_checks_pass_on_the_sharded_pool(first):
    from bugfix_rl.rollout.pool import ShardedLocalPool

    checks = _pool_checks(first, ShardedLocalPool(first.model, first.tokenizer, first.make_env, 2))
    assert set(checks) == {PUBLISHED, STALE} and all(c["ok"] for c in checks.values()), checks


def test_pool_checks_pass_in_process_with_staleness(first):
    """rollout.workers=0 with max_staleness=1: the inline pool samples with what was published."""
    from bugfix_rl.rollout.pool import InlinePool

    checks = _pool_checks(first, InlinePool(first.model, first.tokenizer, first.make_env))
    assert all(c["ok"] for c in checks.values()), checks


def test_preflight_command_passes_in_process_with_staleness(tmp_path, capsys):
    cli.main(["preflight", "threads=1", "rollout.max_staleness=1", "algo.tis_cap=2.0", f"hydra.run.dir={tmp_path}"])
    assert "all 13 checks hold" in capsys.readouterr().out  # + the pool's two and the canary check


@pytest.mark.parametrize("workers", [0, 2])
def test_pool_checks_run_the_kl_term_on_the_worker_and_async_paths(first, workers):
    """With a KL term in the loss (algo=grpo_kl) the pool's update needs a reference: it used to get None
    and end in a TypeError. The update takes make_reference's model, and it is used."""
    from bugfix_rl.rollout.pool import InlinePool, ShardedLocalPool

    pool = (ShardedLocalPool(first.model, first.tokenizer, first.make_env, workers) if workers
            else InlinePool(first.model, first.tokenizer, first.make_env))
    algo = dataclasses.replace(first.cfg.algo, kl_coef=0.04, kl_kind="k3", tis_cap=2.0)
    pool.set_weights(first.model, 0)
    trajectories, batch = batch_of(first, algo, seed=0, pool=pool)
    references = []

    def reference(learner):
        references.append(preflight.frozen_reference(learner))
        return references[-1]

    checks = preflight.check_pool(pool, first.model, trajectories, batch, algo, first.tokenizer, 1,
                                  make_reference=reference)
    assert set(checks) == {PUBLISHED, STALE} and all(c["ok"] for c in checks.values()), checks
    assert len(references) == 1


def test_preflight_command_passes_on_local_workers_with_a_kl_term(tmp_path, capsys):
    cli.main(["preflight", "algo=grpo_kl", "rollout.workers=2", "rollout.engine=local", "threads=1",
              f"hydra.run.dir={tmp_path}"])  # returns normally: exit code 0
    out = capsys.readouterr().out
    assert "checks hold" in out and PUBLISHED in out


def test_pool_that_never_publishes_new_weights_fails(first):
    from bugfix_rl.rollout.pool import ShardedLocalPool

    class Unpublished(ShardedLocalPool):
        def set_weights(self, model, version):
            self.version = version  # claims the version, keeps sampling with the old weights

    checks = _pool_checks(first, Unpublished(first.model, first.tokenizer, first.make_env, 2))
    assert not checks[PUBLISHED]["ok"] and checks[PUBLISHED]["value"] > 1e-3


def test_batch_stamped_as_fresh_is_not_reweighted_and_fails(first):
    from bugfix_rl.rollout.pool import ShardedLocalPool

    restamped = copy.deepcopy(first.trajectories)
    for t in restamped:
        t.policy_version = 1  # a pipeline that loses track of which weights sampled a batch
    checks = _pool_checks(first, ShardedLocalPool(first.model, first.tokenizer, first.make_env, 2), restamped)
    assert not checks[STALE]["ok"]


@pytest.mark.slow  # ~35 s of Ray start-up; the same pool checks run in process above
def test_preflight_command_covers_ray_workers_and_staleness(tmp_path, capsys):
    pytest.importorskip("ray")
    cli.main(["preflight", "threads=1", "rollout.workers=2", "rollout.max_staleness=1", "algo.tis_cap=2.0",
              f"hydra.run.dir={tmp_path}"])
    out = capsys.readouterr().out
    assert "all 13 checks hold" in out and PUBLISHED in out and STALE in out


def test_a_policy_that_never_succeeds_gets_constructed_rewards_not_a_failure(tmp_path):
    """A scratch policy succeeds nowhere, so no batch drawn has a learning signal: the update checks run
    on constructed rewards through the real advantage stage, pass, and say so (they used to FAIL with
    value 0, reporting a trainer failure nobody observed)."""
    cfg = train_config(prompts_per_step=2, group_size=4)
    cfg.policy.init = "scratch"
    tokenizer = build_tokenizer_for(cfg)
    model = build_policy(cfg.policy, tokenizer, init="scratch")
    make_env, close_env = make_env_factory(cfg.env)
    try:
        checks = preflight.run_preflight(cfg, model, tokenizer, make_env)
    finally:
        close_env()
    assert {name for name, c in checks.items() if not c["ok"]} == set()
    assert {name for name, c in checks.items() if c.get("note")} == set(preflight.CONSTRUCTED)
