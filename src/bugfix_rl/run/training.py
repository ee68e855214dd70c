"""`bugfix-rl train`: one run, from the RL base to the final report.

the RL base (and any cold start) -> preflight on the first batch -> the Trainer -> for each step:
Trainer.step, alarms, logs, every eval.ckpt_every steps a validated checkpoint, the stop rules ->
choose the best validation checkpoint -> test once (run/final_eval.py).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

from bugfix_rl.errors import PreflightFailed
from bugfix_rl.gym.envs import make_env_factory
from bugfix_rl.kernels import set_torch_threads
from bugfix_rl.policy.build import build_policy, build_tokenizer_for
from bugfix_rl.present.console import TrainConsole
from bugfix_rl.present.dashboard import JsonlLogger
from bugfix_rl.progress import PhaseProgress
from bugfix_rl.recipes.cold_start import cold_start
from bugfix_rl.recipes.starting_policy import build_starting_policy
from bugfix_rl.run.alarms import malformed_alarm, malformed_alarm_line, mismatch_alarm, mismatch_alarm_line
from bugfix_rl.run.evaluations import save_training_transcripts
from bugfix_rl.run.final_eval import finish_run
from bugfix_rl.run.learner import Learner, broadcast_weights, data_parallel
from bugfix_rl.run.lifecycle import (RunInterrupted, RunState, announce_resume, keep_checkpoint, last_saved,
                                     restore_run, write_status)
from bugfix_rl.run.stopping import collapse_alarm, stop_reason
from bugfix_rl.run.trainer import NonFiniteUpdate, Trainer


def run_training(cfg, run_dir: Path) -> dict:
    """Train, checkpoint, select on validation, test once. Writes metrics.jsonl, eval.json, summary.md
    and status.json: "complete", or on Ctrl-C "interrupted" (then RunInterrupted names the checkpoint
    a resume starts from), or "failed" after too many non-finite updates. With cfg.resume set, the run
    continues from that checkpoint and reaches the uninterrupted run's parameters (run/lifecycle.py)."""
    if cfg.resume:  # cheap checks first: a bad path must not wait for the RL base to be built
        announce_resume(cfg.resume, run_dir)
    set_torch_threads(cfg.threads)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer_for(cfg)
    make_env, close_env = make_env_factory(cfg.env)
    trainer, state = None, RunState()
    try:
        base, model, parallel = starting_policies(cfg, tokenizer, make_env)
        view = TrainConsole(cfg, enabled=cfg.logger.console)
        if cfg.preflight and not cfg.resume:
            preflight_gate(cfg, model, tokenizer, make_env, view, run_dir)
        trainer = build_trainer(cfg, base, model, tokenizer, make_env, parallel)
        start = restore_run(cfg.resume, trainer, state) if cfg.resume else 0
        loggers = open_loggers(cfg.logger, run_dir, state.rows, dataclasses.asdict(cfg))
        keep = partial(keep_checkpoint, trainer=trainer, state=state, cfg=cfg, run_dir=run_dir, view=view)
        if not cfg.resume:
            keep(0, base)
            if cfg.eval.heldout_n > 0:  # the book's capture: one transcript per training task at step 0
                save_training_transcripts(run_dir / "transcripts" / "train_step0.txt", base, tokenizer, make_env,
                                          cfg.algo.temperature, cfg.eval.heldout_seed_offset + cfg.seed + 1)
        with view.progress(cfg.steps, start) as advance:
            train_steps(trainer, state, start, cfg.steps, cfg.eval.ckpt_every or cfg.steps, cfg.stop, keep,
                        report=partial(report_row, loggers, view, advance), say=view.print)
        trainer.close()  # rollout workers (and the learner's other ranks) are not needed for the final evaluations
        result = finish_run(cfg, run_dir, state, base, tokenizer, make_env,
                            PhaseProgress(bars=cfg.logger.console, lines=cfg.logger.console), loggers)
        for logger in loggers:  # open until now: the final evaluation reaches W&B too
            logger.close()
        view.final(result)
        write_status(run_dir, "complete", len(state.rows), state.checkpoints[max(state.checkpoints)])
        return result
    except KeyboardInterrupt:
        last = last_saved(state)
        write_status(run_dir, "interrupted", len(state.rows), last)
        raise RunInterrupted(len(state.rows), last) from None
    except NonFiniteUpdate:
        write_status(run_dir, "failed", len(state.rows), last_saved(state))
        raise
    finally:
        try:
            if trainer is not None:
                trainer.close(stop_followers=False)  # on the normal path they were stopped before the evaluations
        finally:
            close_env()


def starting_policies(cfg, tokenizer, make_env) -> tuple:
    """(base, model, parallel): the run's starting policy (the RL base, after any cold start; the KL
    reference and the final evaluations' "base"), the policy to train (a copy of it, or the resumed
    checkpoint's weights) and this process's share of the update (run/learner.data_parallel)."""
    base = build_starting_policy(cfg.policy, tokenizer, env_cfg=cfg.env, progress=PhaseProgress(bars=cfg.logger.console))
    parallel = data_parallel(cfg.trainer)
    if parallel.world_size > 1:
        dist.barrier()  # the other ranks load the RL base from the cache now
    if cfg.cold_start.enabled:
        cold_start(cfg, base, tokenizer, make_env)  # the run starts from the SFT policy
    model = build_policy(cfg.policy, tokenizer, init=cfg.resume) if cfg.resume else copy.deepcopy(base)
    return base, model, parallel


def preflight_gate(cfg, model, tokenizer, make_env, view: TrainConsole, run_dir: Path) -> None:
    """The preflight checks on the first batch, shown and written to preflight.json; a FAIL stops the
    run before it starts unless allow_failed_preflight."""
    from bugfix_rl.run.preflight import run_preflight  # looked up per call: tests swap in canned checks

    checks = run_preflight(cfg, model, tokenizer, make_env)
    view.preflight(checks)
    (run_dir / "preflight.json").write_text(json.dumps(checks, indent=1))
    if not all(c["ok"] for c in checks.values()) and not cfg.allow_failed_preflight:
        raise PreflightFailed("preflight failed: " + ", ".join(k for k, c in checks.items() if not c["ok"])
                              + " (set allow_failed_preflight=true to train anyway)")


def build_trainer(cfg, base, model, tokenizer, make_env, parallel) -> Trainer:
    """The run's Trainer: every rank starts from rank 0's weights (its cold start, its resume), the
    learner wraps `model` (under FSDP2 `model` itself then holds this rank's shards; the Trainer
    samples from the learner's replica), seeded by cfg.seed; the KL reference is `base`."""
    if parallel.world_size > 1:
        broadcast_weights(base)
        broadcast_weights(model)
    learner = Learner(model, cfg.algo.lr, parallel)
    torch.manual_seed(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    return Trainer(cfg, learner.replica, tokenizer, make_env, generator, reference=base, learner=learner)


def open_loggers(logger_cfg, run_dir: Path, inherited_rows: list[dict], resolved_config: dict) -> list:
    """Where dashboard rows go (logger.*): metrics.jsonl, W&B (which records `resolved_config`),
    TensorBoard. A resumed run's metrics.jsonl starts with the rows it inherits."""
    loggers = [JsonlLogger(run_dir / "metrics.jsonl")] if logger_cfg.jsonl else []
    if logger_cfg.wandb:
        from bugfix_rl.present.wandb_run import WandbLogger

        loggers.append(WandbLogger(logger_cfg, run_dir, resolved_config))
    if logger_cfg.tensorboard:
        from bugfix_rl.present.tensorboard_run import TensorBoardLogger

        loggers.append(TensorBoardLogger(run_dir))
    if logger_cfg.jsonl:
        for row in inherited_rows:
            loggers[0].log(row)
    return loggers


def train_steps(trainer: Trainer, state: RunState, start: int, steps: int, every: int, stop, keep, report,
                say) -> None:
    """Steps start..steps-1: each row gets its alarms (stop: the run's StopConfig) and is reported; a
    checkpoint every `every` steps and at the last (keep(step, policy)); the first stop rule that fires
    ends the run at that step, which is then checkpointed, and `say` tells why."""
    for step in range(start, steps):
        row = trainer.step(step)
        state.rows.append(row)
        sound_alarms(stop, state.rows, step)
        report(row)
        at_checkpoint = (step + 1) % every == 0 or step + 1 == steps
        if at_checkpoint:
            keep(step + 1, trainer.model)
        reason = stop_reason(stop, state.validation, state.rows, at_checkpoint)
        if reason and step + 1 < steps:
            if not at_checkpoint:
                keep(step + 1, trainer.model)
            state.stopped = {"step": step + 1, "reason": reason}
            say(f"stopping at step {step + 1} of {steps}: {reason}")
            break


def report_row(loggers: list, view: TrainConsole, advance, row: dict) -> None:
    """A step's row to every logger, the console and the progress bar."""
    for logger in loggers:
        logger.log(row)
    view.row(row)
    advance(row)


def sound_alarms(stop, rows: list[dict], step: int) -> None:
    """The newest row's alarms (collapse, malformed calls rising, sampler-trainer mismatch) as 0/1
    keys; each says so on stderr when it turns on (stop: the run's StopConfig)."""
    row = rows[-1]
    alarm = collapse_alarm(stop, rows)
    if alarm and not any(r.get("collapse_alarm") for r in rows[:-1]):  # said once, when it starts
        print(f"warning: step {step}: {alarm}", file=sys.stderr)
    row["collapse_alarm"] = float(alarm is not None)
    row.update(malformed_alarm(rows, stop.malformed_window, stop.malformed_rise))
    if row["malformed_alarm"] and not (len(rows) > 1 and rows[-2].get("malformed_alarm")):
        print(malformed_alarm_line(row, stop.malformed_window), file=sys.stderr)  # when it turns on
    row.update(mismatch_alarm(row, stop.kl_mu_prox_max))
    if row["kl_mu_prox_alarm"] and not (len(rows) > 1 and rows[-2].get("kl_mu_prox_alarm")):
        print(mismatch_alarm_line(row, stop.kl_mu_prox_max), file=sys.stderr)  # when it turns on
