"""`bugfix-rl train`: the one place that wires the pipeline stages together.

sample (G episodes per task) -> collate -> advantages -> clipped update -> dashboard row ->
checkpoint + validation every N steps -> choose the best validation checkpoint -> test once.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from bugfix_rl.algo.advantage_stage import advantage_stage
from bugfix_rl.algo.data_parallel import DataParallel, SingleProcess
from bugfix_rl.checkpoint import (CheckpointError, load_checkpoint, model_tensors, optimizer_state,
                                  optimizer_tensors, save_checkpoint)
from bugfix_rl.dashboard import JsonlLogger, dashboard_row, plot_dashboard
from bugfix_rl.envs import env_sandbox, make_env_factory
from bugfix_rl.evaluate.episodes import transcript
from bugfix_rl.evaluate.evaluate import behaviour_stats, infra_failed, sample_trajectories, success_counts
from bugfix_rl.evaluate.plots import plot_pass_at_k
from bugfix_rl.evaluate.stats import gain_kept, paired_summary, pass_at_k_curve, pass_rate_summary
from bugfix_rl.gym.generator import training_pool
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.learner import Learner, broadcast_weights, follow
from bugfix_rl.policy.build import build_policy, build_tokenizer_for
from bugfix_rl.progress import PhaseProgress
from bugfix_rl.rollout.collect import TaskStats, collect_step, draw_step_tasks
from bugfix_rl.rollout.pool import make_pool
from bugfix_rl.rollout.replay import replay_caveats, schedule_from_record, schedule_record
from bugfix_rl.rollout.trajectory import collate
from bugfix_rl.alarms import malformed_alarm, malformed_alarm_line, mismatch_alarm, mismatch_alarm_line
from bugfix_rl.canaries import canary_metrics, sample_canaries
from bugfix_rl.regrade import grading_metrics
from bugfix_rl.stopping import collapse_alarm, stop_reason
from bugfix_rl.viewer import pick_episodes, write_run_page


@dataclass
class RunState:
    """What a run accumulates: dashboard rows and per-checkpoint validation results."""

    rows: list[dict] = field(default_factory=list)
    validation: dict[int, dict] = field(default_factory=dict)
    checkpoints: dict[int, Path] = field(default_factory=dict)
    stopped: dict | None = None  # {"step", "reason"} when a stop.* rule ended the run early
    started: float = field(default_factory=time.perf_counter)  # this process's start, for the wall clock


def library_versions() -> dict:
    import hydra

    from bugfix_rl import kernels

    return {"python": platform.python_version(), "torch": torch.__version__, "hydra": hydra.__version__,
            "kernels": kernels.kernel_signature(), "cpu": kernels.cpu_model(),
            "mkl_vendor_check": kernels.mkl_vendor_check or "not needed"}


class Trainer:
    """Holds the wired stages of one run; `step()` does one GRPO step and returns its dashboard row.

    Rollouts come from a pool (rollout/pool.py). With rollout.max_staleness = k > 0, the batch of
    step s is submitted at step s - k, with the weights the learner had then, and trained at step s:
    generation runs up to k steps ahead of the learner (in Ray actors it runs during the update).
    """

    def __init__(self, cfg, model, tokenizer, make_env, generator: torch.Generator, reference=None, learner=None):
        """reference: the KL reference, the run's starting policy (after any cold start); a resumed
        run passes the same one, not its resumed weights. Default: a copy of `model` as it is now.
        learner: a sharded run's (learner.py), whose replica is `model`; default: `model` in this process."""
        self.cfg, self.algo = cfg, cfg.algo
        self.learner = learner if learner is not None else Learner(model, cfg.algo.lr)
        self.model, self.tokenizer, self.make_env = self.learner.replica, tokenizer, make_env
        self.generator = generator
        self.tasks = training_pool(cfg.env, env_sandbox(make_env))  # what groups are drawn from (env.generated_tasks)
        self.ref_model = None
        if cfg.algo.kl_coef > 0:
            self.ref_model = (reference if reference is not None else copy.deepcopy(model)).eval()
        self.nonfinite_streak = 0  # consecutive optimizer steps skipped for a non-finite loss or gradient norm
        self.task_stats = TaskStats() if (cfg.algo.task_filter or cfg.algo.curriculum) else None
        self.pool = make_pool(cfg, model, tokenizer, make_env)
        self.in_flight: dict[int, object] = {}  # step -> its submitted first sampling round
        self.sampled: dict[int, list] = {}  # step -> its first round, sampled (resolved for a checkpoint, or resumed)

    def _fill_pipeline(self, step: int) -> None:
        """Publish the weights of version `step` and submit every batch up to step + max_staleness."""
        self.pool.set_weights(self.model, step)
        for ahead in range(step, step + self.cfg.rollout.max_staleness + 1):
            if ahead not in self.in_flight and ahead not in self.sampled and (ahead == step or ahead < self.cfg.steps):
                chosen = draw_step_tasks(self.tasks, self.algo, self.generator, self.task_stats,
                                         self.cfg.env.rename_operands, self.cfg.env.shape_variants)
                self.in_flight[ahead] = self.pool.submit(chosen, self.algo.group_size, self.algo.temperature,
                                                         self.generator)

    def step(self, step: int) -> dict:
        algo = self.algo
        t0 = time.perf_counter()
        self._fill_pipeline(step)
        first_round = self.sampled.pop(step) if step in self.sampled else self.pool.result(self.in_flight.pop(step))
        rollouts = collect_step(self.pool, self.tasks, algo, self.generator, self.task_stats, first_round,
                                self.cfg.env.rename_operands, self.cfg.env.shape_variants)
        t1 = time.perf_counter()
        # canary groups (algo.canary_rate): the same weights, their own stream, measured and never trained on
        canaries = sample_canaries(self.pool, self.cfg, step, first_group=len(rollouts.sampled) // algo.group_size)
        t_canary = time.perf_counter() - t1
        batch = collate(rollouts.kept, self.tokenizer.pad_id)
        extra = staleness_metrics(rollouts.kept, step)
        extra.update(advantage_stage(batch, rollouts.kept, algo, self.model, self.ref_model))
        grouped = batch.advantages.view(-1, algo.group_size)
        informative = grouped.abs().max(1).values > 0  # [groups]: a group is one task drawn this step
        extra["zero_adv_frac"] = float((~informative).float().mean())
        extra["tasks_with_gradient"] = int(informative.sum())
        metrics = self.learner.update(batch, algo, self.generator, self.ref_model)
        self._count_nonfinite(step, metrics)
        t2 = time.perf_counter()
        extra.update(time_sample=t1 - t0, time_update=t2 - t1 - t_canary)
        if canaries:
            extra.update(canary_metrics(canaries), time_canary=t_canary)
        if self.cfg.env.grade_reruns > 1:  # regrade.py: how often the k gradings agreed, per-test flakiness
            extra.update(grading_metrics(rollouts.kept))
        return dashboard_row(step, rollouts, metrics, extra)

    def scheduled_batches(self) -> dict[int, list]:
        """The first rounds sampled for later steps and not yet trained on, step -> trajectories (each
        stamped with the weights version that sampled it); waits for any still in flight. A checkpoint
        records them (rollout/replay.py), so a resume trains on the same batches."""
        for ahead in sorted(self.in_flight):
            self.sampled[ahead] = self.pool.result(self.in_flight.pop(ahead))
        return self.sampled

    def _count_nonfinite(self, step: int, metrics: dict) -> None:
        """Track optimizer steps skipped for a non-finite loss or gradient norm; after
        algo.max_nonfinite_skips in a row the run stops (the skipped steps left the weights and Adam's state as they were)."""
        for skipped in metrics.pop("skipped_steps"):
            self.nonfinite_streak = self.nonfinite_streak + 1 if skipped else 0
            if self.nonfinite_streak >= self.algo.max_nonfinite_skips:
                raise NonFiniteUpdate(f"step {step}: {self.nonfinite_streak} optimizer steps in a row had a "
                                      f"non-finite loss or gradient norm and were skipped "
                                      f"(algo.max_nonfinite_skips={self.algo.max_nonfinite_skips})")

    def close(self, stop_followers: bool = True) -> None:
        """Close the rollout pool and, unless told not to, let the learner's other ranks return. On an
        error path they are not told: they may be inside a collective the message would not match
        (distributed.py stops or disconnects them)."""
        self.pool.close()
        if stop_followers:
            self.learner.stop_followers()


def staleness_metrics(trajectories, step: int) -> dict:
    """Staleness (learner step - sampling weights' step) per trained policy token: mean and max."""
    tokens = torch.tensor([t.policy_tokens for t in trajectories], dtype=torch.float)
    lag = torch.tensor([step - t.policy_version for t in trajectories], dtype=torch.float)
    return {"staleness_mean": float((lag * tokens).sum() / tokens.sum().clamp_min(1)),
            "staleness_max": float(lag[tokens > 0].max()) if bool((tokens > 0).any()) else 0.0}


def cold_start(cfg, model, tokenizer, make_env) -> list[float]:
    """SFT `model` in place on oracle demonstrations or its own successes; returns the SFT losses.
    Says so on stderr, with progress bars when logger.console is set and stderr is a terminal."""
    from bugfix_rl.algo.sft import sft_train
    from bugfix_rl.progress import PhaseProgress
    from bugfix_rl.envs import oracle_for
    from bugfix_rl.rollout.demonstrations import oracle_demonstrations, rejection_sampled

    cs = cfg.cold_start
    tasks = make_tasks("train")
    progress = PhaseProgress(bars=cfg.logger.console)
    source = (f"{cs.demos} oracle demonstrations" if cs.source == "oracle"
              else f"its own successes in {cs.rejection_per_task} attempts per training task")
    with progress.phase(f"SFT warm-up before RL (cold_start.enabled): {cs.steps} steps on {source}",
                        done="SFT warm-up done"):
        if cs.source == "oracle":
            with progress.stage("oracle demonstrations", cs.demos) as advance:
                demos = oracle_demonstrations(tasks, cs.demos, make_env, tokenizer, oracle_for(cfg.env), cs.seed,
                                              cs.renamed_operands, on_episode=advance, model=model)
        else:
            demos = rejection_sampled(model, tokenizer, tasks, cs.rejection_per_task, make_env,
                                      cfg.algo.temperature, cs.seed)
        if not demos:
            raise PreflightFailed("cold start: rejection sampling found no successful episode to learn from")
        with progress.stage("SFT", cs.steps) as advance:
            return sft_train(model, demos, cs.steps, cs.lr, cs.batch_size, torch.Generator().manual_seed(cs.seed),
                             on_step=lambda loss: advance(f"loss {loss:.3f}"))


def evaluate_split(model, tokenizer, make_env, split: str, n: int, seed: int, temperature: float,
                   episodes: list | None = None) -> dict:
    """pass@1 with its interval on a split; the sampled trajectories are appended to `episodes` if given."""
    tasks = make_tasks(split)
    trajectories = sample_trajectories(model, tokenizer, tasks, n, make_env, temperature, seed)
    if episodes is not None:
        episodes.extend(trajectories)
    summary = pass_rate_summary(success_counts(trajectories, len(tasks)), n)
    summary["tasks_names"] = [t.name for t in tasks]
    summary["infra_failed"] = infra_failed(trajectories)  # counted as failures above
    return summary


def evaluate_with_transcripts(model, tokenizer, make_env, split: str, n: int, seed: int, temperature: float,
                              transcript_path: Path, episodes: list | None = None) -> dict:
    """evaluate_split plus per-episode behaviour means (`behaviour`: the tool table's numbers) and one
    decoded transcript per task (its first episode) written to `transcript_path`."""
    trajectories: list = []
    summary = evaluate_split(model, tokenizer, make_env, split, n, seed, temperature, trajectories)
    if episodes is not None:
        episodes.extend(trajectories)
    summary["behaviour"] = behaviour_stats(trajectories)
    save_transcripts(transcript_path, make_tasks(split), trajectories, n, tokenizer)
    return summary


def save_transcripts(path: Path, tasks, trajectories, n: int, tokenizer) -> None:
    """One decoded episode per task (the first of its n, task-contiguous trajectories) written to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(transcript(task.name, trajectories[i * n], tokenizer) for i, task in enumerate(tasks)))


def run_record(cfg, state: RunState) -> dict:
    """What the book's lab scripts saved beside the scores: the env's tool schema and resource limits,
    the wall clock of this process, and the peak device memory (None without a CUDA device)."""
    from bugfix_rl.gym.chat import EDIT_MENU_TOOLS
    from bugfix_rl.gym.tools.calls import TOOL_SCHEMAS

    peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
    return {"tool_schema": TOOL_SCHEMAS if cfg.env.name == "tools" else EDIT_MENU_TOOLS,
            "resource_limits": dataclasses.asdict(cfg.env.sandbox) if cfg.env.name == "tools" else None,
            "wall_seconds": time.perf_counter() - state.started, "peak_device_memory_mb": peak}


def checkpoint_meta(cfg, step: int, tokenizer) -> dict:
    return {"kind": "policy", "step": step, "config": dataclasses.asdict(cfg),
            "vocab": list(tokenizer.words)}


def run_training(cfg, run_dir: Path) -> dict:
    """Train, checkpoint, select on validation, test once. Writes metrics.jsonl, eval.json, summary.md
    and status.json: "complete", or on Ctrl-C "interrupted" (then RunInterrupted names the checkpoint
    a resume starts from).

    With cfg.resume set, the run continues from that checkpoint: weights, optimizer state, the
    sampling generator's state, dashboard rows and validation results are restored, so the resumed
    run reaches the same parameters as an uninterrupted one (same seed, same threads). With
    rollout.max_staleness > 0 the checkpoint also holds the batches sampled for later steps
    (`Trainer.scheduled_batches`, each episode with the weights version that sampled it), and the
    resumed run trains on those, so it too reaches the uninterrupted run's parameters.
    """
    from bugfix_rl.console import TrainConsole
    from bugfix_rl.preflight import run_preflight

    if cfg.resume:  # cheap checks first: a bad path must not wait for the RL base to be built
        _, meta = load_checkpoint(cfg.resume)
        origin = Path(cfg.resume).resolve().parent.parent
        print(f"resuming {origin} from step {meta.get('step')} into {run_dir}", file=sys.stderr)
    torch.set_num_threads(cfg.threads)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer_for(cfg)
    make_env, close_env = make_env_factory(cfg.env)
    trainer, state = None, RunState()
    try:
        base = build_policy(cfg.policy, tokenizer, env_cfg=cfg.env, progress=PhaseProgress(bars=cfg.logger.console))
        parallel = data_parallel(cfg)
        if parallel.world_size > 1:
            dist.barrier()  # the other ranks load the RL base from the cache now
        if cfg.cold_start.enabled:
            cold_start(cfg, base, tokenizer, make_env)  # the run starts from the SFT policy
        model = build_policy(cfg.policy, tokenizer, init=cfg.resume) if cfg.resume else copy.deepcopy(base)
        view = TrainConsole(cfg, enabled=cfg.logger.console)
        if cfg.preflight and not cfg.resume:
            checks = run_preflight(cfg, model, tokenizer, make_env)
            view.preflight(checks)
            (run_dir / "preflight.json").write_text(json.dumps(checks, indent=1))
            if not all(c["ok"] for c in checks.values()) and not cfg.allow_failed_preflight:
                raise PreflightFailed("preflight failed: " + ", ".join(k for k, c in checks.items() if not c["ok"])
                                      + " (set allow_failed_preflight=true to train anyway)")
        if parallel.world_size > 1:  # every rank starts from rank 0's weights (its cold start, its resume)
            broadcast_weights(base)
            broadcast_weights(model)
        learner = Learner(model, cfg.algo.lr, parallel)
        model = learner.replica  # under FSDP2 `model` itself now holds this rank's shards
        torch.manual_seed(cfg.seed)
        generator = torch.Generator().manual_seed(cfg.seed)
        trainer = Trainer(cfg, model, tokenizer, make_env, generator, reference=base, learner=learner)
        start = restore_run(cfg.resume, trainer, state) if cfg.resume else 0
        loggers = [JsonlLogger(run_dir / "metrics.jsonl")] if cfg.logger.jsonl else []
        if cfg.logger.wandb:
            from bugfix_rl.wandb_run import WandbLogger

            loggers.append(WandbLogger(cfg.logger, run_dir, dataclasses.asdict(cfg)))
        if cfg.logger.tensorboard:
            from bugfix_rl.tensorboard_run import TensorBoardLogger

            loggers.append(TensorBoardLogger(run_dir))
        if cfg.logger.jsonl:
            for row in state.rows:  # a resumed run's metrics.jsonl starts with the rows it inherits
                loggers[0].log(row)
        every = cfg.eval.ckpt_every or cfg.steps
        temperature = cfg.algo.temperature

        def keep(step: int, policy) -> None:
            path = run_dir / "checkpoints" / f"step_{step:03d}.safetensors"
            state.checkpoints[step] = path
            view.status(f"validating step {step}: {cfg.eval.n_val} episodes x {len(make_tasks('val'))} tasks")
            state.validation[step] = evaluate_split(policy, tokenizer, make_env, "val", cfg.eval.n_val,
                                                    cfg.eval.val_seed, temperature)
            resume_tensors, resume_meta = resume_state(trainer, state)
            save_checkpoint(path, {**model_tensors(policy), **resume_tensors},
                            {**checkpoint_meta(cfg, step, tokenizer), **resume_meta})
            view.checkpoint(step, state.validation[step])
            view.status(f"step {step} validation pass@1 {state.validation[step]['pass_at_1']:.3f}")

        if not cfg.resume:
            keep(0, base)
            if cfg.eval.heldout_n > 0:  # the book's capture: one transcript per training task at step 0
                train_tasks = make_tasks("train")
                save_transcripts(run_dir / "transcripts" / "train_step0.txt", train_tasks,
                                 sample_trajectories(base, tokenizer, train_tasks, 1, make_env, temperature,
                                                     cfg.eval.heldout_seed_offset + cfg.seed + 1), 1, tokenizer)
        with view.progress(cfg.steps, start) as advance:
            for step in range(start, cfg.steps):
                row = trainer.step(step)
                state.rows.append(row)
                alarm = collapse_alarm(cfg.stop, state.rows)
                if alarm and not any(r.get("collapse_alarm") for r in state.rows[:-1]):  # said once, when it starts
                    print(f"warning: step {step}: {alarm}", file=sys.stderr)
                row["collapse_alarm"] = float(alarm is not None)
                row.update(malformed_alarm(state.rows, cfg.stop.malformed_window, cfg.stop.malformed_rise))
                if row["malformed_alarm"] and not (len(state.rows) > 1 and state.rows[-2].get("malformed_alarm")):
                    print(malformed_alarm_line(row, cfg.stop.malformed_window), file=sys.stderr)  # when it turns on
                row.update(mismatch_alarm(row, cfg.stop.kl_mu_prox_max))
                if row["kl_mu_prox_alarm"] and not (len(state.rows) > 1 and state.rows[-2].get("kl_mu_prox_alarm")):
                    print(mismatch_alarm_line(row, cfg.stop.kl_mu_prox_max), file=sys.stderr)  # when it turns on
                for logger in loggers:
                    logger.log(row)
                view.row(row)
                advance(row)
                at_checkpoint = (step + 1) % every == 0 or step + 1 == cfg.steps
                if at_checkpoint:
                    keep(step + 1, model)
                reason = stop_reason(cfg.stop, state.validation, state.rows, at_checkpoint)
                if reason and step + 1 < cfg.steps:
                    if not at_checkpoint:
                        keep(step + 1, model)
                    state.stopped = {"step": step + 1, "reason": reason}
                    view.print(f"stopping at step {step + 1} of {cfg.steps}: {reason}")
                    break
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


def data_parallel(cfg):
    """The update's row sharing for this process (algo/data_parallel.py): the default process group's
    rank under trainer.strategy ddp or fsdp (distributed.py made the group), else this process alone."""
    if cfg.trainer.strategy == "single":
        return SingleProcess()
    return DataParallel(cfg.trainer.strategy)


def follow_run(cfg) -> None:
    """Ranks 1..N-1 of a sharded run: the same policy and learner as rank 0, which samples, evaluates,
    writes the run dir and tells these ranks when to update (learner.follow)."""
    torch.set_num_threads(cfg.threads)
    tokenizer = build_tokenizer_for(cfg)
    dist.barrier()  # rank 0 has built the RL base (or found it in the cache)
    base = build_policy(cfg.policy, tokenizer, env_cfg=cfg.env)
    model = copy.deepcopy(base)
    broadcast_weights(base)
    broadcast_weights(model)
    learner = Learner(model, cfg.algo.lr, data_parallel(cfg))
    follow(learner, cfg.algo, base.eval() if cfg.algo.kl_coef > 0 else None)
    del learner, model, base  # FSDP2's sharded tensors go before the process group does (distributed._joined)
    gc.collect()


def resume_state(trainer: "Trainer", state: RunState) -> tuple[dict, dict]:
    """(tensors, metadata) that, beyond the weights, a resumed run needs: the optimizer's state (in the
    one-process format at any world size), the sampling generator, the rows and validations so far."""
    tensors, param_groups = optimizer_tensors(trainer.learner.optimizer_state())
    tensors["rng.generator"] = trainer.generator.get_state()
    return tensors, {"optimizer_param_groups": param_groups, "rows": state.rows,
            "rollout_schedule": schedule_record(trainer.scheduled_batches()),
            "validation": {str(s): v for s, v in state.validation.items()},
            "checkpoints": {str(s): str(p) for s, p in state.checkpoints.items()},
            "task_stats": trainer.task_stats.rate if trainer.task_stats else None}


def restore_run(path: str, trainer: "Trainer", state: RunState) -> int:
    """Load optimizer, generator, rows and validation from a checkpoint; returns the step to start at."""
    tensors, meta = load_checkpoint(path)
    if "rng.generator" not in tensors or "rows" not in meta:
        raise CheckpointError(f"{path} has no resume state (weights only)")
    trainer.learner.load_optimizer_state(optimizer_state(tensors, meta["optimizer_param_groups"]))
    trainer.generator.set_state(tensors["rng.generator"])
    trainer.sampled = schedule_from_record(meta.get("rollout_schedule", {}))  # before it: drawn again
    if trainer.task_stats is not None and meta.get("task_stats"):
        trainer.task_stats.rate = dict(meta["task_stats"])
    state.rows = list(meta["rows"])
    state.validation = {int(s): v for s, v in meta["validation"].items()}
    state.checkpoints = {int(s): Path(p) for s, p in meta["checkpoints"].items()}
    return int(meta["step"])


class PreflightFailed(RuntimeError):
    pass


class NonFiniteUpdate(RuntimeError):
    """Too many optimizer steps in a row had a non-finite loss or gradient norm (the message names the step)."""


class RunInterrupted(Exception):
    """Ctrl-C during a run: `steps` training steps were done, `checkpoint` (None if none yet) resumes it."""

    def __init__(self, steps: int, checkpoint: Path | None):
        super().__init__(f"interrupted after {steps} steps")
        self.steps, self.checkpoint = steps, checkpoint


def write_status(run_dir: Path, status: str, step: int, last_checkpoint: Path | None) -> None:
    """status.json (written atomically): whether the run finished ("complete"), was stopped by Ctrl-C
    ("interrupted") or by a failed update ("failed"), and where it stands."""
    import os

    tmp = run_dir / "status.json.tmp"
    tmp.write_text(json.dumps(
        {"status": status, "step": step, "last_checkpoint": str(last_checkpoint) if last_checkpoint else None}))
    os.replace(tmp, run_dir / "status.json")


def last_saved(state: RunState) -> Path | None:
    """The newest checkpoint that is complete on disk (not one cut mid-write), or None."""
    saved = [step for step, path in state.checkpoints.items() if path.is_file()]
    return state.checkpoints[max(saved)] if saved else None


def finish_run(cfg, run_dir: Path, state: RunState, base, tokenizer, make_env,
               progress: PhaseProgress | None = None, loggers=()) -> dict:  # loggers: each gets logger.final(...)
    """Choose the checkpoint on validation, evaluate base and chosen on test once (and on the
    held-out and the `shapes` tasks), write the reports. `progress` shows the evaluations."""
    from bugfix_rl.report_run import write_summary

    progress = progress or PhaseProgress(bars=False, lines=False)
    evaluations = []
    if cfg.eval.test:
        evaluations.append(f"test (base and chosen, {len(make_tasks('test'))} tasks x {cfg.eval.n_test})")
    if cfg.eval.heldout_n > 0:
        evaluations.append(f"held-out (base and chosen, {len(make_tasks('heldout'))} tasks x {cfg.eval.heldout_n})")
    if cfg.eval.shapes_n > 0:
        evaluations.append(f"shapes (base and chosen, {len(make_tasks('shapes'))} tasks x {cfg.eval.shapes_n})")
    if evaluations:
        with progress.phase("final evaluation: " + ", ".join(evaluations), done="final evaluation done"), \
                progress.stage("policies evaluated", 2 * len(evaluations)) as advance:
            result, episodes = _final_evaluations(cfg, run_dir, state, base, tokenizer, make_env, advance)
    else:
        result, episodes = _final_evaluations(cfg, run_dir, state, base, tokenizer, make_env,
                                              lambda status="": None)
    (run_dir / "eval.json").write_text(json.dumps(result, indent=1))
    for caveat in result["replay"]["caveats"]:  # one line each, also without logger.console
        print(f"warning: {caveat}", file=sys.stderr)
    plot_dashboard(state.rows, run_dir / "dashboard.png", title=f"{cfg.experiment} / {cfg.arm} / seed {cfg.seed}",
                   validation=state.validation)
    write_summary(run_dir, result, state.rows)
    write_run_page(run_dir, result, episodes, tokenizer)
    for logger in loggers:
        logger.final(result, episodes, tokenizer)
    return result


def _final_evaluations(cfg, run_dir: Path, state: RunState, base, tokenizer, make_env, advance) -> tuple[dict, dict]:
    """finish_run's result dict, and the viewer's episodes (label -> viewer.pick_episodes output) of the
    test evaluation (else the held-out one, else the shapes one); advance(name) after each policy evaluated."""
    episodes: dict[str, list] = {}
    stopped = state.stopped or {"step": None, "reason": None}

    val_score = {s: v["pass_at_1"] for s, v in state.validation.items()}
    chosen_step = max(val_score, key=lambda s: (val_score[s], -s))  # best validation; ties -> earliest
    chosen = build_policy(cfg.policy, tokenizer, init=str(state.checkpoints[chosen_step]))
    temperature = cfg.algo.temperature
    result = {
        "chosen_step": chosen_step,
        "stop": {"rule": dataclasses.asdict(cfg.stop), "stopped_at": stopped["step"], "reason": stopped["reason"],
                 "steps_saved": cfg.steps - stopped["step"] if state.stopped else 0},
        "validation": {str(s): v for s, v in state.validation.items()},
        "config": {"seed": cfg.seed, "threads": cfg.threads, "arm": cfg.arm, "experiment": cfg.experiment,
                   "steps": cfg.steps, "versions": library_versions(),
                   "resolved": dataclasses.asdict(cfg)},
        "run": run_record(cfg, state),
        # why a rerun or resume might not end at these bytes ([]: nothing known; docs/REPRODUCIBILITY.md)
        "replay": {"caveats": replay_caveats(next(base.parameters()).is_cuda, state.rows)},
        "train": {"late_reward": _late_mean(state.rows, "reward"), "final_entropy": state.rows[-1].get("entropy"),
                  "final_exploit": state.rows[-1].get("exploit"), "late_exploit": _late_mean(state.rows, "exploit"),
                  "late_canary_reward": _late_mean(state.rows, "canary_reward"),  # None without canaries
                  "sampled_episodes": sum(r["sampled_episodes"] for r in state.rows),
                  "collapse_alarm_steps": [r["step"] for r in state.rows if r.get("collapse_alarm")],
                  "malformed_alarm_steps": [r["step"] for r in state.rows if r.get("malformed_alarm")],
                  "kl_mu_prox_alarm_steps": [r["step"] for r in state.rows if r.get("kl_mu_prox_alarm")],
                  "seconds_per_step": sum(r["time_sample"] + r["time_update"] for r in state.rows) / len(state.rows)},
    }
    if cfg.eval.test:
        test = {}
        for name, policy in (("base", base), ("chosen", chosen)):
            sampled: list = []
            test[name] = evaluate_split(policy, tokenizer, make_env, "test", cfg.eval.n_test, cfg.eval.test_seed,
                                        temperature, sampled)
            episodes[f"test, {name} ({'RL base' if name == 'base' else 'step ' + str(chosen_step)})"] = pick_episodes(
                sampled, test[name]["tasks_names"], cfg.eval.n_test)
            advance(f"test {name}")
        n = cfg.eval.n_test
        test["paired_diff"] = paired_summary(test["chosen"]["per_task"], test["base"]["per_task"], n)
        for name in ("base", "chosen"):
            test[name]["pass_at_k_curve"] = pass_at_k_curve(n, torch.tensor(test[name]["per_task"]))
        plot_pass_at_k({name: test[name]["pass_at_k_curve"] for name in ("base", "chosen")},
                       run_dir / "pass_at_k.png", title=f"test pass@k, {len(test['base']['per_task'])} tasks x {n}")
        result["test"] = test
    # (split, episodes per task, generator seed, viewer label): each its own seeded stream, after the test's
    for split, n, seed, label in (("heldout", cfg.eval.heldout_n, cfg.eval.heldout_seed_offset + cfg.seed, "held-out"),
                                  ("shapes", cfg.eval.shapes_n, cfg.eval.shapes_seed_offset + cfg.seed, "shapes")):
        if n <= 0:
            continue
        chosen_sampled, base_sampled = [], []  # the chosen checkpoint, as on the test split
        result[split] = evaluate_with_transcripts(chosen, tokenizer, make_env, split, n, seed, temperature,
                                                  run_dir / "transcripts" / f"{split}_chosen.txt", chosen_sampled)
        advance(f"{label} chosen")
        # the run's starting policy on the same tasks and stream: before vs after, paired over tasks
        result[f"{split}_base"] = evaluate_with_transcripts(base, tokenizer, make_env, split, n, seed, temperature,
                                                            run_dir / "transcripts" / f"{split}_base.txt", base_sampled)
        advance(f"{label} base")
        result[f"{split}_paired_diff"] = paired_summary(result[split]["per_task"],
                                                        result[f"{split}_base"]["per_task"], n)
        if not episodes:  # the viewer shows the test episodes when there are any, else held-out, else shapes
            names = result[split]["tasks_names"]
            episodes[f"{label}, RL base"] = pick_episodes(base_sampled, names, n)
            episodes[f"{label}, chosen (step {chosen_step})"] = pick_episodes(chosen_sampled, names, n)
    if "heldout" in result and "shapes" in result:
        result["shapes_gain_kept"] = gain_kept(result["heldout_paired_diff"], result["shapes_paired_diff"])
    return result, episodes


def _late_mean(rows: list[dict], key: str, window: int = 5) -> float | None:
    values = [r[key] for r in rows[-window:] if r.get(key) is not None]
    return sum(values) / len(values) if values else None
