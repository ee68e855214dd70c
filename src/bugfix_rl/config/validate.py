"""`validate`: the values a schema's types cannot check: those from a fixed set (CHOICES, which the CLI
also checks override by override), those that must be positive, and the combinations that do not go
together. Each failure is a ConfigError whose message is one line naming the key and what is allowed;
to_object turns a composed config into its dataclass and validates it, for the CLI (a UserError)."""

from __future__ import annotations

import math

from bugfix_rl.errors import UserError


class ConfigError(ValueError):
    """A config value is not allowed; the message is one line naming the key and the valid values."""


CHOICES = {
    "env.name": ("edit_menu", "tools"),
    "env.reward": ("hidden", "public", "partial", "mixed"),
    "env.truncation": ("zero", "grade"),
    "policy.name": ("tiny", "qwen3"),
    "policy.dtype": ("float32", "bfloat16"),
    "policy.generation_cache": ("dynamic", "static"),  # rollout/chat_sampler.py: GENERATION_CACHES
    "algo.adv_mode": ("grpo", "dr_grpo", "rloo", "reinforce_pp"),
    "algo.ratio_level": ("token", "sequence"),
    "algo.loss_mode": ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "norm_const"),
    "algo.kl_kind": ("k1", "k2", "k3"),
    "algo.tis_level": ("token", "sequence"),
    "logger.wandb_mode": ("offline", "online", "disabled"),
    "cold_start.source": ("oracle", "rejection"),
    "rollout.engine": ("ray", "local"),
    "trainer.strategy": ("single", "ddp", "fsdp"),
    "trainer.backend": ("auto", "gloo", "nccl"),
    "stop.collapse": ("warn", "stop", "off"),
    "stop.gain": ("point", "interval"),
    "algo.lr_schedule": ("constant", "linear", "cosine"),  # algo/lr_schedule.py: DECAYS (test_lr_schedule checks)
    "policy.base.lr_schedule": ("constant", "cosine"),  # algo/sft.py: LR_SCHEDULES (test_packing checks they agree)
    "policy.tools_base.lr_schedule": ("constant", "cosine"),
}
VALIDATION_SPLITS = ("val", "shapes_val")  # eval.val_splits: those a checkpoint may be chosen on

POSITIVE = ("algo.group_size", "algo.prompts_per_step", "algo.temperature", "algo.lr", "algo.epochs",
            "algo.minibatches", "algo.max_sample_rounds", "env.max_turns", "threads", "eval.n_val",
            "eval.n_test", "algo.max_grad_norm", "algo.max_nonfinite_skips", "bench.repeats", "bench.baseline_threads", "cold_start.steps",
            "cold_start.batch_size", "cold_start.demos", "cold_start.rejection_per_task", "cold_start.lr",
            "steps", "trainer.world_size", "trainer.timeout_minutes", "stop.collapse_window", "stop.collapse_entropy",
            "env.sandbox.timeout_s", "env.sandbox.cpu_s", "env.sandbox.memory_mb", "env.sandbox.file_mb",
            "env.sandbox.nproc", "env.sandbox.workers")


def _get(cfg, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def validate(cfg) -> None:
    """Raise ConfigError (one line) for a value outside its allowed set or range."""
    for key, allowed in CHOICES.items():
        value = _get(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{key}={value!r} is not allowed; valid values: {', '.join(allowed)}")
    for key in POSITIVE:
        if _get(cfg, key) <= 0:
            raise ConfigError(f"{key}={_get(cfg, key)!r} must be > 0")
    from bugfix_rl.sandbox.isolation import LAYERS  # stdlib only

    unknown = [layer for layer in cfg.env.sandbox.min_isolation if layer not in LAYERS]
    if unknown:
        raise ConfigError(f"env.sandbox.min_isolation: unknown layer {unknown[0]!r}; valid: {', '.join(LAYERS)}")
    if cfg.seed < 0:
        raise ConfigError(f"seed={cfg.seed} must be >= 0")
    if cfg.policy.copy_softcap < 0:
        raise ConfigError(f"policy.copy_softcap={cfg.policy.copy_softcap} must be >= 0 (0 = no cap)")
    for switch in ("copy_edit_align", "copy_edit_resume", "copy_lookup"):
        if getattr(cfg.policy, switch) and not (cfg.policy.copy_head and cfg.env.name == "tools"):
            raise ConfigError(f"policy.{switch} needs policy.copy_head=true and env=tools (it reads Edit's old/new)")
    if cfg.policy.copy_lookup and cfg.policy.copy_ngram < 2:  # policy/copy_lookup.py MIN_RUN
        raise ConfigError(f"policy.copy_lookup needs policy.copy_ngram >= 2 (it follows runs of 2 or more matching "
                          f"tokens), not {cfg.policy.copy_ngram}")
    if cfg.policy.copy_lookup_feed and not cfg.policy.copy_lookup:
        raise ConfigError("policy.copy_lookup_feed reads the lookup output's target: it needs policy.copy_lookup=true")
    if cfg.policy.compile_decode and cfg.policy.generation_cache != "static":
        raise ConfigError("policy.compile_decode needs policy.generation_cache=static (fixed shapes to compile)")
    for switch in ("copy_resume_cut", "copy_resume_next"):
        if getattr(cfg.policy, switch) and not cfg.policy.copy_edit_resume:
            raise ConfigError(f"policy.{switch} needs policy.copy_edit_resume=true (it reads the copy pointer)")
    algo = cfg.algo
    if algo.group_size < 2:
        raise ConfigError(f"algo.group_size={algo.group_size} must be >= 2 (group advantages need a group)")
    if algo.loss_mode == "norm_const" and not algo.norm_const:
        raise ConfigError("algo.loss_mode=norm_const needs algo.norm_const > 0")
    if not 0 <= algo.lr_warmup_steps < cfg.steps:
        raise ConfigError(f"algo.lr_warmup_steps={algo.lr_warmup_steps} must lie in [0, steps={cfg.steps}) (warm-up"
                          " steps before the schedule; its first step is taken at lr 0)")
    if not 0 <= algo.lr_decay_steps <= cfg.steps - algo.lr_warmup_steps:
        raise ConfigError(f"algo.lr_decay_steps={algo.lr_decay_steps} must lie in [0, steps - lr_warmup_steps ="
                          f" {cfg.steps - algo.lr_warmup_steps}] (the last steps, over which lr decays; 0 = all after warm-up);"
                          " a shorter run than its preset's sets it too, or algo.lr_schedule=constant algo.lr_decay_steps=0")
    if algo.lr_decay_steps and algo.lr_schedule == "constant":
        raise ConfigError(f"algo.lr_decay_steps={algo.lr_decay_steps} decays lr over the last steps: it needs"
                          " algo.lr_schedule=linear or cosine (constant never decays)")
    if algo.minibatches > algo.group_size * algo.prompts_per_step:
        raise ConfigError(f"algo.minibatches={algo.minibatches} exceeds the batch size")
    if not (0 <= algo.clip_low < 1 and 0 <= algo.clip_high < math.inf):
        raise ConfigError(f"algo.clip_low={algo.clip_low} must lie in [0, 1) and algo.clip_high={algo.clip_high} be >= 0"
                          " (the ratio is clipped to [1 - clip_low, 1 + clip_high])")
    if not 0 <= algo.canary_rate <= 1:
        raise ConfigError(f"algo.canary_rate={algo.canary_rate} must lie in [0, 1] (canary groups per training group; 0 = none)")
    if algo.max_traj_gap is not None and not algo.max_traj_gap >= 0:
        raise ConfigError(f"algo.max_traj_gap={algo.max_traj_gap} must be >= 0 (a bound on |log pi_prox - log mu|; null = off)")
    if algo.dual_clip is not None and algo.dual_clip <= 1:
        raise ConfigError(f"algo.dual_clip={algo.dual_clip} must be > 1")
    turn = algo.turn_credit
    if not (0 <= turn.coef < math.inf and 0 <= turn.malformed_cost < math.inf and 0 <= turn.unanswered_cost < math.inf
            and 0 <= turn.gamma <= 1):
        raise ConfigError("algo.turn_credit: coef, malformed_cost and unanswered_cost must be finite and >= 0, "
                          "gamma must lie in [0, 1]")
    _validate_rollout(cfg)
    _validate_trainer(cfg)
    for recipe in ("base", "tools_base"):  # the scripted agents' probabilities
        for key, value in vars(getattr(cfg.policy, recipe)).items():
            if key.startswith("p_") and not 0 <= value <= 1:
                raise ConfigError(f"policy.{recipe}.{key}={value} must lie in [0, 1] (a probability)")
    if not cfg.env.step_budget_s > 0:
        raise ConfigError(f"env.step_budget_s must be > 0 (seconds per step), got {cfg.env.step_budget_s}")
    if cfg.env.name == "tools" and cfg.env.truncation != "zero":
        raise ConfigError("env.truncation is an edit-menu switch: the tools env always grades the final file")
    if not 0 <= cfg.env.shape_variants <= 1:
        raise ConfigError(f"env.shape_variants must lie in [0, 1] (a share of groups), got {cfg.env.shape_variants}")
    if not 0.0 <= cfg.env.generated_reshape <= 1.0:
        raise ConfigError(f"env.generated_reshape={cfg.env.generated_reshape} must be in [0, 1] (a share of the "
                          f"generated tasks)")
    if not 0.0 <= cfg.env.generated_grammar <= 1.0:
        raise ConfigError(f"env.generated_grammar={cfg.env.generated_grammar} must be in [0, 1] (a share of the "
                          f"generated tasks)")
    if cfg.env.generated_grammar_flat_pairs and not cfg.env.generated_grammar > 0:
        raise ConfigError("env.generated_grammar_flat_pairs=true needs env.generated_grammar > 0 (it shapes the "
                          "grammar's bodies)")
    for family in ("minmax", "compare"):
        key = f"generated_two_line_{family}"
        share = getattr(cfg.env, key)
        if not 0.0 <= share <= 1.0:
            raise ConfigError(f"env.{key}={share} must be in [0, 1] (a share of the generated {family} tasks)")
        if share > 0 and not cfg.env.generated_tasks > 0:
            raise ConfigError(f"env.{key} > 0 needs env.generated_tasks > 0 (it replaces generated tasks)")
    if cfg.env.generated_tasks < 0:
        raise ConfigError(f"env.generated_tasks={cfg.env.generated_tasks} must be >= 0 (0 = the book's 20 tasks only)")
    if not (0 <= cfg.env.flaky_rate <= 0.5 and 0 <= cfg.env.step_penalty < math.inf and 0 <= cfg.env.partial_alpha < math.inf):
        raise ConfigError("env.flaky_rate must lie in [0, 0.5]; env.step_penalty and env.partial_alpha must be >= 0")
    if not (0 <= cfg.env.reward_flip_rate <= 0.5 and cfg.env.grade_reruns >= 1 and cfg.env.grade_reruns % 2 == 1):
        raise ConfigError("env.reward_flip_rate must lie in [0, 0.5] and env.grade_reruns be odd and >= 1 (a majority, no tie)")
    if (cfg.env.reward_flip_rate > 0 or cfg.env.grade_reruns > 1) and cfg.env.reward not in ("hidden", "public"):
        raise ConfigError(f"env.reward_flip_rate and env.grade_reruns flip or vote on a pass/fail verdict: they need "
                          f"env.reward=hidden or public, not {cfg.env.reward}")
    stop = cfg.stop
    if stop.patience < 0 or stop.zero_adv_window < 0 or stop.min_delta < 0:
        raise ConfigError("stop.patience, stop.zero_adv_window and stop.min_delta must be >= 0 (0 = off)")
    if not 0 <= stop.zero_adv_threshold <= 1:
        raise ConfigError(f"stop.zero_adv_threshold={stop.zero_adv_threshold} must lie in [0, 1]")
    if not stop.kl_mu_prox_max >= 0:
        raise ConfigError(f"stop.kl_mu_prox_max={stop.kl_mu_prox_max} must be >= 0 (0 = no alarm)")
    if stop.malformed_window < 0 or stop.malformed_rise < 0:
        raise ConfigError("stop.malformed_window and stop.malformed_rise must be >= 0 (window 0 = no alarm)")
    if not (0 <= stop.max_infra_share <= 1 and 0 <= cfg.env.infra_fault_rate <= 1):
        raise ConfigError("stop.max_infra_share and env.infra_fault_rate must lie in [0, 1]")
    if cfg.env.guide_old_string and not (cfg.env.name == "tools" and cfg.policy.name == "tiny"):
        raise ConfigError("env.guide_old_string needs env=tools and policy=tiny (the word sampler guides the Edit call)")
    if cfg.env.check_edit_syntax and cfg.env.name != "tools":
        raise ConfigError("env.check_edit_syntax needs env=tools (the edit menu's ops never leave a file unparseable)")
    if cfg.env.infra_fault_rate > 0 and cfg.env.name != "tools":
        raise ConfigError("env.infra_fault_rate needs env=tools (the edit menu grades in-process, with no sandbox)")
    _check_val_splits(cfg.eval)
    if stop.patience and not cfg.eval.ckpt_every:
        raise ConfigError("stop.patience counts checkpoints: set eval.ckpt_every too")


def _check_val_splits(eval_cfg) -> None:
    """eval.val_splits: val and/or shapes_val, none twice; a split chosen on is not scored again at the end."""
    splits = list(eval_cfg.val_splits)
    typed = f"eval.val_splits=[{','.join(map(str, splits))}]"
    if not splits or len(set(splits)) < len(splits) or not set(splits) <= set(VALIDATION_SPLITS):
        raise ConfigError(f"{typed}: each must be {' or '.join(VALIDATION_SPLITS)}, at least one, none twice "
                          f"(test, heldout and shapes are read once, at the end)")
    if "shapes_val" in splits and eval_cfg.shapes_val_n:
        raise ConfigError(f"{typed} chooses the checkpoint on the shapes_val tasks: eval.shapes_val_n must be 0 "
                          f"(their score for the chosen checkpoint would be optimistic)")


def _validate_rollout(cfg) -> None:
    rollout = cfg.rollout
    for key in ("workers", "max_staleness"):
        if getattr(rollout, key) < 0:
            raise ConfigError(f"rollout.{key}={getattr(rollout, key)} must be >= 0")
    if rollout.worker_threads <= 0:
        raise ConfigError(f"rollout.worker_threads={rollout.worker_threads} must be > 0")
    if rollout.max_staleness > 0 and cfg.algo.tis_cap is None:
        raise ConfigError(f"rollout.max_staleness={rollout.max_staleness} needs algo.tis_cap (the truncated "
                          "importance correction of stale samples), e.g. algo.tis_cap=2.0")


def _validate_trainer(cfg) -> None:
    trainer = cfg.trainer
    if (trainer.strategy == "single") != (trainer.world_size == 1):
        raise ConfigError(f"trainer.strategy={trainer.strategy} with trainer.world_size={trainer.world_size}: "
                          "single is one process; ddp and fsdp need trainer.world_size >= 2")
    if trainer.world_size > 1 and (cfg.rollout.workers > 0 or cfg.rollout.max_staleness > 0):
        raise ConfigError("a sharded learner (trainer.world_size > 1) samples in rank 0's process: use "
                          "rollout.workers=0 and rollout.max_staleness=0 with it")


def to_object(cfg):
    """A composed config (Hydra's DictConfig) as its schema's dataclass, a train config validated: a
    missing required value or a value `validate` refuses is a UserError (one line)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue

    try:
        obj = OmegaConf.to_object(cfg)
    except MissingMandatoryValue as err:
        key = getattr(err, "full_key", None) or str(err).splitlines()[0]
        raise UserError(f"missing required value: pass {key}=<value>") from None
    if hasattr(obj, "algo"):
        try:
            validate(obj)
        except ConfigError as err:
            raise UserError(str(err)) from None
    return obj
