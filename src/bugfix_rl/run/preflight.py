"""Preflight: the ten invariants every RL trainer should assert, run on the first batch.

With rollout workers or bounded staleness (rollout.workers > 0 or rollout.max_staleness > 0) the
first batch is sampled through the configured pool (so check 2 compares the workers' log-probs with
the trainer's), and two more checks cover that path (POOL_BOUNDS): weights published after an
update sample exactly like the learner, and a batch one version stale gets importance weights != 1.
With canary tasks on (algo.canary_rate > 0, gym/canaries.py) one more check runs the env's honest
scripted policies on every canary and fails if some reward would pay any of their episodes: a
canary an honest policy can earn on measures no hack (CANARY_BOUNDS).

The first batch goes through a Trainer's own stages (run/trainer.py): its pool samples it (also at
a second temperature, inline), `Trainer.collate` and `Trainer.advantages` (the step's advantage
stage: KL-in-reward and overlong shaping, group advantages) prepare it; the checks then run
`policy_update` with the configured minibatches and micro-batching on copies of the policy, so
preflight never changes the run. A test breaks the real code (a
monkeypatched loss, ratio, sampler or update) and sees the check fire; `check_batch` also takes the
update and reference as arguments.

A check never reports a failure it did not observe: when no batch drawn has a group whose rewards
differ, the first batch gets constructed rewards (the first episode of each group 1, the rest 0)
and runs through the same advantage stage, and the checks that use them say so.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable

import torch

from bugfix_rl.algo.objective import AGGREGATIONS, KL_ESTIMATORS
from bugfix_rl.algo.update import batch_logprobs, policy_update
from bugfix_rl.run.trainer import Trainer
from bugfix_rl.types import Batch, Trajectory, collate

BOUNDS = {
    "mask = policy tokens": ("==", 0),
    "sampler = trainer log-prob": ("<", 1e-4),
    "ratio = 1 before any step": ("<", 1e-4),
    "group advantage mean = 0": ("<", 1e-5),
    "loss invariant to padding": ("<", 1e-6),
    "accumulated = one-pass gradient": ("<", 1e-5),
    "old_logp frozen in the update": (">", 0.0),
    "update raises log pi where A > 0": (">", 0.0),
    "KL to reference > 0 after a step": (">", 0.0),
    "ratio != 1 once the policy moved": (">", 1e-4),
}
POOL_BOUNDS = {
    "published weights = learner's": ("<", 1e-4),
    "stale batch gets IS weights != 1": (">", 0.0),
}
CANARY = "canaries: honest policies earn 0"
CANARY_BOUNDS = {CANARY: ("==", 0)}  # with algo.canary_rate > 0 (gym/canaries.py)


def structural_policy_mask(traj: Trajectory, tokenizer, max_action_tokens: int) -> list[bool]:
    """Which tokens the policy produced, derived from the token structure alone (not from the sampler):
    after each end-of-observation token, tokens up to the end-of-action token (or max_action_tokens)."""
    eoa, eoo = tokenizer.end_of_action_id, tokenizer.end_of_observation_id
    mask, in_action, action_len = [], False, 0
    for token in traj.ids:
        if in_action:
            mask.append(True)
            action_len += 1
            if token == eoa or action_len == max_action_tokens:
                in_action = False
        else:
            mask.append(False)
            if token == eoo:
                in_action, action_len = True, 0
    return mask


def _verdict(name: str, value: float) -> dict:
    op, bound = {**BOUNDS, **POOL_BOUNDS, **CANARY_BOUNDS}[name]
    ok = {"==": value == bound, "<": value < bound, ">": value > bound}[op]
    return {"value": float(value), "ok": bool(ok), "bound": f"{op} {bound:g}"}


def _flat_grad(model) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in model.parameters()])


class GradientRecorder:
    """Stands in for the optimizer inside `policy_update`: records each step's gradient, moves nothing."""

    def __init__(self, model):
        self.model, self.steps = model, []

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.steps.append(_flat_grad(self.model).clone())


def _recorded_update(model, batch: Batch, algo, update_fn: Callable, reference, **changes) -> tuple[list, dict]:
    """One epoch of `update_fn` (the real policy_update) on copies, with the optimizer replaced by a
    GradientRecorder and no gradient clipping: (the gradient of each optimizer step, its metrics)."""
    probe = copy.deepcopy(model)
    recorder = GradientRecorder(probe)
    algo = dataclasses.replace(algo, epochs=1, max_grad_norm=float("inf"), **changes)
    metrics = update_fn(probe, recorder, copy.deepcopy(batch), algo, torch.Generator().manual_seed(0), reference)
    return recorder.steps, metrics or {}


def _one_pass_vs_accumulated(model, batch: Batch, algo, update_fn: Callable, reference) -> float:
    """Max |grad(one pass) - grad(micro-batches)| relative to the gradient's scale, through the real
    update: one minibatch, micro_batch_size 0 against the configured size (a quarter of the batch
    when none is configured, so accumulation is always exercised)."""
    micro = algo.micro_batch_size if 0 < algo.micro_batch_size < len(batch) else max(1, -(-len(batch) // 4))
    one_pass, _ = _recorded_update(model, batch, algo, update_fn, reference, minibatches=1, micro_batch_size=0)
    accumulated, _ = _recorded_update(model, batch, algo, update_fn, reference, minibatches=1,
                                      micro_batch_size=micro)
    if len(one_pass) != 1 or len(accumulated) != 1:
        return float("inf")  # the update did not take exactly one step on one minibatch
    return float((one_pass[0] - accumulated[0]).abs().max() / one_pass[0].abs().max().clamp_min(1e-12))


def _ratio_before_any_step(model, batch: Batch, algo, update_fn: Callable, reference) -> float:
    """max(approx_kl, clip_frac) over every minibatch of the real update while nothing moves: the
    PPO ratio it builds (RATIOS, the TIS anchor, micro-batch trimming) must be 1 on every policy token."""
    _, metrics = _recorded_update(model, batch, algo, update_fn, reference)
    if "approx_kl" not in metrics:
        return float("inf")  # nothing measured: the update never built a ratio
    return max(metrics["approx_kl"], metrics["clip_frac"])


PROBE_LR = 1e-3  # the second-pass check's step: Adam moves every weight by about this much, on any model


def _ratio_after_a_step(model, batch: Batch, algo, update_fn: Callable, reference) -> float:
    """max |log ratio| over the policy tokens of the real update run on a copy for two epochs of one
    minibatch, with Adam at max(algo.lr, PROBE_LR). The first pass sees only the sampler-trainer gap
    (below check 2's bound, 1e-4); the second, after one optimizer step, must see pi_theta / pi_old
    != 1 well above it, or the ratio's denominator is not the frozen anchor (the sampler's log-probs;
    with tis_cap pi_old, the trainer's before the step) but the current policy, and clipping never acts."""
    probe = copy.deepcopy(model)
    optimizer = torch.optim.Adam(probe.parameters(), lr=max(algo.lr, PROBE_LR))
    metrics = update_fn(probe, optimizer, copy.deepcopy(batch), dataclasses.replace(algo, epochs=2, minibatches=1),
                        torch.Generator().manual_seed(0), reference) or {}
    return metrics.get("log_ratio_abs_max", 0.0)  # absent: the update never built a ratio


def with_kl_term(algo):
    """`algo` with a KL-to-reference term in the loss (kl_coef 0.1), so an update always has a reference
    to measure and to need; an algo that is not a dataclass (a test's stand-in) as it is."""
    return dataclasses.replace(algo, kl_coef=0.1, kl_in_reward=False) if dataclasses.is_dataclass(algo) else algo


def frozen_reference(model):
    """The KL reference: a frozen copy of the policy as it is now (never the learner itself)."""
    return copy.deepcopy(model).eval()


def check_batch(model, trajectories: list[Trajectory], batch: Batch, algo, tokenizer, max_action_tokens: int,
                update_fn: Callable | None = None, make_reference: Callable = frozen_reference,
                other_temperature: tuple[Batch, float] | None = None) -> dict[str, dict]:
    """Run the ten checks on one collated first batch (advantages filled). Returns name -> verdict.

    update_fn: the update (default: `policy_update` as training calls it, looked up at call time);
    make_reference(learner) gives the KL reference of the update in checks 7-9 (injectable, so a test
    can hand it the learner itself and see check 9 fire); other_temperature: a batch sampled at another
    temperature and that temperature, which check 2 also scores.
    """
    from bugfix_rl.algo import update as update_module

    update_fn = update_fn or update_module.policy_update
    checks = {}
    algo_kl = with_kl_term(algo)
    # 1. the mask is exactly the policy's tokens, aligned with ids[:, 1:]
    mismatches = 0
    policy_mask = getattr(model, "structural_policy_mask", None)  # a chat model knows its own turn structure
    for row, traj in enumerate(trajectories):
        structure = policy_mask(traj) if policy_mask else structural_policy_mask(traj, tokenizer, max_action_tokens)
        expected = torch.tensor(structure[1:], dtype=torch.float)
        got = batch.mask[row, : len(expected)]
        mismatches += int((got != expected).sum()) + int(batch.mask[row, len(expected):].sum())
    checks["mask = policy tokens"] = _verdict("mask = policy tokens", mismatches)
    # 2-3. the trainer reproduces the sampler's log-probs; the ratio is 1 before any update
    with torch.no_grad():
        logp = batch_logprobs(model, batch, algo).logp
    on_mask = batch.mask > 0
    gap = float((logp - batch.old_logp).abs()[on_mask].max())
    if other_temperature is not None:  # a sampler or trainer that ignores the temperature shows here
        other, temperature = other_temperature
        with torch.no_grad():
            other_logp = batch_logprobs(model, other, algo, temperature).logp
        gap = max(gap, float((other_logp - other.old_logp).abs()[other.mask > 0].max()))
    checks["sampler = trainer log-prob"] = _verdict("sampler = trainer log-prob", gap)
    # 4. group advantages are centred
    group_means = batch.advantages.view(-1, algo.group_size).mean(1)
    checks["group advantage mean = 0"] = _verdict("group advantage mean = 0", float(group_means.abs().max()))
    # 5. padding never reaches the loss: extra pad columns holding random ids change nothing
    learner = copy.deepcopy(model)  # takes the one real update in checks 7-9
    reference = make_reference(learner)  # the KL-in-loss term needs one from here on
    weights = AGGREGATIONS[algo.loss_mode](batch.mask, algo.norm_const)
    extra = 8
    max_len = getattr(getattr(model, "cfg", None), "max_len", None) or float("inf")
    # rows with room for the extra columns inside the model's context (all of them, almost always)
    rows = torch.tensor([i for i, t in enumerate(trajectories) if len(t.ids) + extra <= max_len], dtype=torch.long)
    with torch.no_grad():
        sub = batch.rows(rows)
        sub_weights = weights[rows][:, : sub.mask.shape[1]]
        loss, _ = update_module.minibatch_loss(model, sub, sub_weights, algo, reference)  # the trainer's loss
        noise = torch.randint(4, tokenizer.vocab_size, (len(sub), extra), generator=torch.Generator().manual_seed(0))
        zeros = torch.zeros(len(sub), extra)
        padded = Batch(torch.cat([sub.ids, noise], 1), torch.cat([sub.mask, zeros], 1),
                       torch.cat([sub.old_logp, zeros], 1), sub.rewards, sub.groups, sub.advantages, sub.pad_id,
                       None if sub.turn_advantages is None else torch.cat([sub.turn_advantages, zeros], 1),
                       None if sub.allowed is None else torch.cat(
                           [sub.allowed, sub.allowed.new_full((len(sub), extra, sub.allowed.shape[2]), -1)], 1))
        padded_loss, _ = update_module.minibatch_loss(model, padded, torch.cat([sub_weights, zeros], 1), algo,
                                                      reference)
    checks["loss invariant to padding"] = _verdict("loss invariant to padding", abs(float(loss - padded_loss)))
    # 3. the update's own ratio is 1 everywhere while no parameter has moved
    checks["ratio = 1 before any step"] = _verdict("ratio = 1 before any step",
                                                   _ratio_before_any_step(model, batch, algo, update_fn, reference))
    # 6. gradient accumulation over micro-batches equals the one-pass gradient, in the real update
    accumulated = _one_pass_vs_accumulated(model, batch, algo, update_fn, reference)
    checks["accumulated = one-pass gradient"] = _verdict("accumulated = one-pass gradient", accumulated)
    # 10. a second pass over the batch, after a step, sees ratios != 1 (the anchor did not follow the policy)
    checks["ratio != 1 once the policy moved"] = _verdict("ratio != 1 once the policy moved",
                                                          _ratio_after_a_step(model, batch, algo_kl, update_fn,
                                                                              reference))
    # 7-9. one real update (with a KL term so the reference check has something to measure)
    optimizer = torch.optim.Adam(learner.parameters(), lr=algo.lr)
    old_before = batch.old_logp.clone()
    with torch.no_grad():
        # the trainer's own log-probs before the step: measured from the sampler's instead, the ~1e-6
        # sampler/trainer gap made an update that does nothing pass checks 7 and 8
        before_logp = batch_logprobs(learner, batch, algo).logp
    update_fn(learner, optimizer, batch, algo_kl, torch.Generator().manual_seed(0), reference)
    with torch.no_grad():
        new_logp = batch_logprobs(learner, batch, algo).logp
        ref_logp = batch_logprobs(reference, batch, algo).logp
    frozen = torch.equal(old_before, batch.old_logp)
    moved = float(((new_logp - before_logp).abs() * batch.mask).sum() / batch.mask.sum())
    checks["old_logp frozen in the update"] = _verdict("old_logp frozen in the update", moved if frozen else 0.0)
    delta = ((new_logp - before_logp) * batch.mask).sum(1)  # [B] change of log pi per episode
    adv = batch.advantages
    corr = float(torch.corrcoef(torch.stack([delta, adv]))[0, 1]) if adv.std() > 0 and delta.std() > 0 else 0.0
    checks["update raises log pi where A > 0"] = _verdict("update raises log pi where A > 0", corr)
    kl = float((KL_ESTIMATORS["k3"](new_logp, ref_logp) * batch.mask).sum() / batch.mask.sum())
    checks["KL to reference > 0 after a step"] = _verdict("KL to reference > 0 after a step", kl)
    return {name: checks[name] for name in BOUNDS}  # in the documented order


def preflight_trainer(cfg, model, tokenizer, make_env):
    """A Trainer on `model` whose stages preflight drives: its pool the configured one (the inline
    sampler without rollout workers), its tasks the book's training tasks (preflight takes the first
    ones; nothing is generated), its learner and KL reference copies as a run's would be."""
    from bugfix_rl.gym.tasks import make_tasks

    return Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(cfg.seed), tasks=make_tasks("train"))


def first_batch(trainer, seed: int = 0, temperature: float | None = None, pool=None, tasks: int | None = None):
    """The first training batch: trajectories and the collated batch, its advantages filled by the
    trainer's own stages (`Trainer.collate`, `Trainer.advantages`: the step's advantage stage).

    pool: the rollout pool to sample through (rollout/pool.py); default the trainer's.
    tasks: how many training tasks (default algo.prompts_per_step)."""
    from bugfix_rl.gym.tasks import make_tasks

    algo = trainer.algo
    chosen = make_tasks("train")[: tasks or algo.prompts_per_step]
    generator = torch.Generator().manual_seed(seed)
    temp = algo.temperature if temperature is None else temperature
    pool = pool or trainer.pool
    trajectories = pool.result(pool.submit(chosen, algo.group_size, temp, generator))
    return trajectories, advantaged_batch(trainer, trajectories)


def advantaged_batch(trainer, trajectories: list[Trajectory]) -> Batch:
    batch = trainer.collate(trajectories)
    trainer.advantages(batch, trajectories)
    return batch


def with_constructed_rewards(trainer, trajectories: list[Trajectory]):
    """No batch had a learning signal: the first episode of each group gets reward 1, the others 0,
    and the batch goes through the real advantage stage, so checks 4 and 7-9 have material."""
    trajectories = [dataclasses.replace(t, reward=1.0 if i % trainer.algo.group_size == 0 else 0.0)
                    for i, t in enumerate(trajectories)]
    return trajectories, advantaged_batch(trainer, trajectories)


def check_pool(pool, model, trajectories: list[Trajectory], batch: Batch, algo, tokenizer, max_staleness: int,
               seed: int = 0, update_fn: Callable = policy_update,
               make_reference: Callable = frozen_reference) -> dict[str, dict]:
    """The rollout path's two checks, after one real update of a copy of the policy (the learner), with
    a KL term in the loss as in checks 7-9 (`with_kl_term`; make_reference(learner) gives its reference),
    so the worker and async paths run the KL-in-loss update too:

    - published weights = learner's: the pool, given the learner's weights as version 1, samples a
      fresh batch whose sampler log-probs the learner reproduces (< 1e-4);
    - stale batch gets IS weights != 1 (max_staleness > 0 only): the first batch, now one version
      old, keeps its sampler log-probs, so min(pi_learner / mu, C) differs from 1 (mean |w - 1| > 0)
      and its staleness is within the bound. A pipeline that re-scored stale batches with the
      current weights, or never published new ones, fails here.
    """
    from bugfix_rl.algo.objective import truncated_is_weights
    from bugfix_rl.gym.tasks import make_tasks

    checks = {}
    learner = copy.deepcopy(model)
    update_fn(learner, torch.optim.Adam(learner.parameters(), lr=algo.lr), batch, with_kl_term(algo),
              torch.Generator().manual_seed(0), make_reference(learner))
    pool.set_weights(learner, 1)
    tasks = make_tasks("train")[: algo.prompts_per_step]
    fresh = collate(pool.result(pool.submit(tasks, algo.group_size, algo.temperature,
                                            torch.Generator().manual_seed(seed + 1))), tokenizer.pad_id)
    with torch.no_grad():
        logp = batch_logprobs(learner, fresh, algo).logp
        prox = batch_logprobs(learner, batch, algo).logp
    gap = float((logp - fresh.old_logp).abs()[fresh.mask > 0].max())
    checks["published weights = learner's"] = _verdict("published weights = learner's", gap)
    if max_staleness > 0:
        weights, _ = truncated_is_weights(prox, batch.old_logp, batch.mask, algo.tis_cap, algo.tis_level)
        lag = 1 - min(t.policy_version for t in trajectories)
        moved = float(((weights - 1).abs() * batch.mask).sum() / batch.mask.sum())
        checks["stale batch gets IS weights != 1"] = _verdict("stale batch gets IS weights != 1",
                                                              moved if 0 < lag <= max_staleness else 0.0)
    return checks


def check_canaries(env_name: str, make_env, seed: int = 0) -> dict[str, dict]:
    """The canary check: each honest scripted policy of the env (gym/canaries.honest_policies: the oracle,
    the noisy agent with its exploit off, ...) once on every canary task; the value is the number of
    those episodes whose graded outcome some reward would pay (a hidden test passed, or every public
    test), which must be 0. The note names the first few."""
    from bugfix_rl.evaluate.canary_reward import honest_canary_episodes

    result = honest_canary_episodes(env_name, make_env, seed)
    verdict = _verdict(CANARY, len(result.paid))
    if result.paid:
        verdict["note"] = (f"{len(result.paid)} of {result.episodes} honest episodes paid on canaries: "
                           + ", ".join(result.paid[:3]))
    return {CANARY: verdict}


SIGNAL_ATTEMPTS = 4
CONSTRUCTED = ("group advantage mean = 0", "old_logp frozen in the update", "update raises log pi where A > 0",
               "KL to reference > 0 after a step", "ratio != 1 once the policy moved")


def run_preflight(cfg, model, tokenizer, make_env) -> dict[str, dict]:
    """The ten checks on the first batch that carries a learning signal (plus the pool's two when
    rollout.workers > 0 or rollout.max_staleness > 0, and the canary check when algo.canary_rate > 0).

    The first batch goes through the stages of a Trainer on `model` (`preflight_trainer`). The update
    checks need at least one group whose rewards differ: up to SIGNAL_ATTEMPTS batches (seeds seed,
    seed+1, ...) are drawn; when none has signal, the first gets constructed rewards
    (`with_constructed_rewards`) and the checks that use them carry a note saying so. Check 2 also
    scores one group sampled at a second temperature (0.7, or 1.0 when training at 0.7).
    """
    from bugfix_rl.rollout.pool import InlinePool

    rollout = cfg.rollout
    with_pool = rollout.workers > 0 or rollout.max_staleness > 0
    trainer = preflight_trainer(cfg, model, tokenizer, make_env)
    try:
        if with_pool:
            trainer.pool.set_weights(model, 0)
        drawn = []
        for attempt in range(SIGNAL_ATTEMPTS):
            trajectories, batch = first_batch(trainer, seed=cfg.seed + attempt)
            drawn.append((trajectories, batch))
            if bool((batch.advantages != 0).any()):
                break
        constructed = not bool((batch.advantages != 0).any())
        if constructed:
            trajectories, batch = with_constructed_rewards(trainer, drawn[0][0])
        other_temperature = 0.7 if cfg.algo.temperature != 0.7 else 1.0
        _, other = first_batch(trainer, seed=cfg.seed, temperature=other_temperature, tasks=1,
                               pool=InlinePool(model, tokenizer, make_env))  # the inline sampler, as training's
        max_action_tokens = make_env(make_first_task(), None).max_action_tokens
        checks = check_batch(model, trajectories, batch, cfg.algo, tokenizer, max_action_tokens,
                             other_temperature=(other, other_temperature))
        if constructed:
            for name in CONSTRUCTED:
                checks[name]["note"] = (f"constructed rewards: none of {SIGNAL_ATTEMPTS} batches drawn had a group "
                                        f"whose rewards differed")
        if with_pool:
            checks.update(check_pool(trainer.pool, model, trajectories, batch, cfg.algo, tokenizer,
                                     rollout.max_staleness, cfg.seed))
        if getattr(cfg.algo, "canary_rate", 0) > 0:
            checks.update(check_canaries(cfg.env.name, make_env, cfg.seed))
    finally:
        trainer.close()
    return checks


def make_first_task():
    from bugfix_rl.gym.tasks import make_tasks

    return make_tasks("train")[0]
