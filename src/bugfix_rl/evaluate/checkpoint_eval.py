"""`bugfix-rl eval`: evaluate one checkpoint (or two, paired) on a task split.

A checkpoint written by `train` carries the full training config and the vocabulary in its metadata,
so the tokenizer, the environment and the sampling temperature are rebuilt from the checkpoint alone,
not from whatever the current defaults are. Two checkpoints are evaluated on the same seeded stream
(same tasks, same episode count, same generator seed: the same renamed function names per episode),
and compared on them: an interval over tasks (intervals.paired_task_interval, what holds for new
tasks) and McNemar's exact test with the paired SE over episode pairs (what holds for these tasks).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from bugfix_rl.checkpoint import CheckpointError, load_checkpoint
from bugfix_rl.evaluate.evaluate import (action_sequences, behaviour_stats, infra_failed, per_task_table,
                                         sample_trajectories, success_counts)
from bugfix_rl.evaluate.intervals import task_mean_interval
from bugfix_rl.evaluate.coverage_regimes import one_policy_warning
from bugfix_rl.evaluate.reliability import reliability_summary
from bugfix_rl.evaluate.stats import mcnemar, paired_summary, paired_summary_over_templates, pass_at_k, pass_at_k_curve
from bugfix_rl.gym.tasks import make_tasks

KS = (1, 4, 8)
SPLITS = ("train", "val", "test", "heldout", "shapes", "shapes_val")  # shapes(_val): 50 tasks each from templates
# training never sees; shapes_val is for choosing recipes, shapes is read once


@dataclass
class LoadedPolicy:
    """A policy rebuilt from a checkpoint: model, tokenizer, the training config, and the step."""

    path: str
    model: torch.nn.Module
    tokenizer: object
    cfg: object  # TrainConfig of the run that wrote the checkpoint
    step: int | None


def config_from_meta(meta: dict, path) -> object:
    """The TrainConfig stored in a checkpoint's metadata (CheckpointError if absent or unreadable)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from bugfix_rl.config import TrainConfig

    raw = meta.get("config")
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} holds no training config (kind {meta.get('kind')!r});"
                              " bugfix-rl eval needs a policy checkpoint written by bugfix-rl train")
    raw = _renamed_keys(raw)
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), raw))
    except OmegaConfBaseException as err:
        raise CheckpointError(f"checkpoint {path} has a config this version cannot read:"
                              f" {str(err).splitlines()[0]}") from None


# env keys that moved since checkpoints were first written: env.<old> -> env.sandbox.<new>
MOVED_TO_ENV_SANDBOX = {"sandbox_workers": "workers", "sandbox_min_isolation": "min_isolation"}


def _renamed_keys(raw: dict) -> dict:
    """A stored config with the keys that have moved since (env.sandbox_workers -> env.sandbox.workers)."""
    if "env" not in raw:
        return raw
    env = dict(raw["env"] or {})
    moved = {new: env.pop(old) for old, new in MOVED_TO_ENV_SANDBOX.items() if old in env}
    if moved:
        env["sandbox"] = {**env.get("sandbox", {}), **moved}
    return {**raw, "env": env}


def load_policy(path: str) -> LoadedPolicy:
    """Rebuild the tokenizer and the policy of a training checkpoint from its stored config.

    The tokenizer is rebuilt for the stored config (not read from the stored vocabulary), so a
    checkpoint whose vocabulary no longer matches the gym fails in build_policy with one line instead
    of reading the gym's words under other ids.
    """
    from bugfix_rl.policy.build import build_policy, build_tokenizer_for

    _, meta = load_checkpoint(path)
    cfg = config_from_meta(meta, path)
    tokenizer = build_tokenizer_for(cfg)
    model = build_policy(cfg.policy, tokenizer, init=str(path)).eval()
    return LoadedPolicy(str(path), model, tokenizer, cfg, meta.get("step"))


def pass_at_ks(counts: torch.Tensor, n: int, ks=KS) -> dict[str, dict]:
    """{"1": {"value", "ci"}, ...}: task-averaged pass@k, each with its Wilson task interval (95%)."""
    out = {}
    for k in ks:
        if k <= n:
            mean, lo, hi = task_mean_interval(pass_at_k(n, counts, k))  # over [T] per-task pass@k
            out[str(k)] = {"value": float(mean), "ci": [float(lo), float(hi)]}
    return out


def evaluate_policy(policy: LoadedPolicy, split: str, n: int, seed: int, top: int,
                    explain_below: float | None = None) -> dict:
    """Sample n episodes per task of `split` and summarise them (counts, pass@k, behaviour, sequences)."""
    from bugfix_rl.evaluate.episodes import failure_analysis
    from bugfix_rl.gym.envs import make_env_factory, oracle_for

    tasks = make_tasks(split)
    cfg = policy.cfg
    make_env, close_env = make_env_factory(cfg.env)
    failures = None
    try:
        trajectories = sample_trajectories(policy.model, policy.tokenizer, tasks, n, make_env,
                                           cfg.algo.temperature, seed)
        if explain_below is not None:
            failures = failure_analysis(trajectories, tasks, n, policy.tokenizer, make_env, oracle_for(cfg.env),
                                        explain_below, model=policy.model)
    finally:
        close_env()
    counts = success_counts(trajectories, len(tasks))  # [T]
    return {
        "path": policy.path,
        "step": policy.step,
        "run": {"experiment": cfg.experiment, "arm": cfg.arm, "seed": cfg.seed, "env": cfg.env.name,
                "reward": cfg.env.reward},
        "temperature": cfg.algo.temperature,
        "pass_at_k": pass_at_ks(counts, n),
        "pass_at_k_curve": pass_at_k_curve(n, counts),
        **reliability_summary(counts, n, KS),  # pass_hat_k, flip_rate, noise_floor
        "interval_warning": one_policy_warning(counts, n),  # None unless Wilson under-covers here
        "per_task": [int(c) for c in counts.tolist()],
        "outcomes": [int(t.info.success) for t in trajectories],  # [T * n], task-contiguous
        "infra_failed": infra_failed(trajectories),  # of those, decided by infrastructure (counted as failures)
        "behaviour": behaviour_stats(trajectories),
        "sequences": action_sequences(trajectories, top),
        "per_task_table": per_task_table(trajectories),
        **({"failures": failures} if failures is not None else {}),
    }


def paired_difference(a: dict, b: dict, n: int, names: list[str]) -> dict:
    """a - b in pass@1 on the same tasks (`names`) and stream: the task interval (new tasks); under
    "over_templates", for generated tasks (several per template), that interval with each template's tasks
    one unit (new shapes); and under "episodes", the paired SE and McNemar's exact test over episode
    pairs (these tasks only)."""
    summary = paired_summary(a["per_task"], b["per_task"], n)
    over = paired_summary_over_templates(a["per_task"], b["per_task"], n, names)
    if over:
        summary["over_templates"] = over
    summary["episodes"] = mcnemar(torch.tensor(a["outcomes"]), torch.tensor(b["outcomes"]))
    return summary


def run_eval(ckpt: str, split: str, n: int, seed: int, top: int = 5, compare: str | None = None,
             explain_below: float | None = None) -> dict:
    """The whole `bugfix-rl eval` result as a JSON-able dict."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not allowed; valid values: {', '.join(SPLITS)}")
    if n < 1:
        raise ValueError(f"n={n} must be >= 1 (episodes per task)")
    paths = [ckpt] + ([compare] if compare else [])
    policies = [load_policy(p) for p in paths]  # load all first: a bad second path fails before sampling
    envs = [p.cfg.env.name for p in policies]
    if len(set(envs)) > 1:  # the pairing needs the same tasks in the same env: one episode stream
        raise ValueError(f"compare={compare} was trained on env={envs[1]} and ckpt={ckpt} on env={envs[0]}:"
                         " a paired comparison needs checkpoints of one env")
    result = {"split": split, "n": n, "seed": seed, "tasks": [t.name for t in make_tasks(split)],
              "models": [evaluate_policy(p, split, n, seed, top, explain_below) for p in policies]}
    if compare:
        result["paired_diff"] = paired_difference(result["models"][0], result["models"][1], n, result["tasks"])
    return result


def label_of(model: dict) -> str:
    """Short name of an evaluated checkpoint: run dir / step file."""
    path = Path(model["path"])
    run = path.parent.parent.name if path.parent.name == "checkpoints" else path.parent.name
    return f"{run}/{path.name}"
