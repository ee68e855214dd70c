"""The Trainer: one run's wired stages, and `step`, one GRPO step composed from them.

    sample (G episodes per task, through the rollout pool) -> canaries (measured, never trained on)
    -> collate -> advantages (algo/advantage_stage.py) -> update (the learner) -> the step's dashboard row

Each stage works on its own: preflight (run/preflight.py) drives `collate` and `advantages` on its
first batch, so the checks see exactly what a step does.
"""

from __future__ import annotations

import copy
import time

import torch

from bugfix_rl.algo.advantage_stage import advantage_stage
from bugfix_rl.algo.lr_schedule import lr_factor
from bugfix_rl.evaluate.canary_reward import canary_metrics, sample_canaries
from bugfix_rl.gym.envs import env_sandbox
from bugfix_rl.gym.generator import training_pool
from bugfix_rl.gym.regrade import grading_metrics
from bugfix_rl.present.dashboard import dashboard_row
from bugfix_rl.rollout.collect import StepRollouts, TaskStats, collect_step, draw_step_tasks
from bugfix_rl.rollout.pool import make_pool
from bugfix_rl.run.learner import Learner
from bugfix_rl.types import Batch, Trajectory, collate


class NonFiniteUpdate(RuntimeError):
    """Too many optimizer steps in a row had a non-finite loss or gradient norm (the message names the step)."""


class Trainer:
    """Holds the wired stages of one run; `step()` does one GRPO step and returns its dashboard row.

    Rollouts come from a pool (rollout/pool.py). With rollout.max_staleness = k > 0, the batch of
    step s is submitted at step s - k, with the weights the learner had then, and trained at step s:
    generation runs up to k steps ahead of the learner (in Ray actors it runs during the update).
    """

    def __init__(self, cfg, model, tokenizer, make_env, generator: torch.Generator, reference=None, learner=None,
                 tasks: list | None = None):
        """reference: the KL reference, the run's starting policy (after any cold start); a resumed
        run passes the same one, not its resumed weights. Default: a copy of `model` as it is now.
        learner: a sharded run's (run/learner.py), whose replica is `model`; default: `model` in this process.
        tasks: what groups are drawn from; default the book's training tasks plus env.generated_tasks."""
        self.cfg = cfg  # whole: the canary draw reads algo, env and seed (evaluate/canary_reward.py)
        self.algo, self.env = cfg.algo, cfg.env
        self.steps, self.max_staleness = cfg.steps, cfg.rollout.max_staleness
        self.learner = learner if learner is not None else Learner(model, cfg.algo.lr)
        self.model, self.tokenizer, self.make_env = self.learner.replica, tokenizer, make_env
        self.generator = generator
        self.tasks = tasks if tasks is not None else training_pool(cfg.env, env_sandbox(make_env))
        self.ref_model = None
        if cfg.algo.kl_coef > 0:
            self.ref_model = (reference if reference is not None else copy.deepcopy(model)).eval()
        self.nonfinite_streak = 0  # consecutive optimizer steps skipped for a non-finite loss or gradient norm
        self.task_stats = TaskStats() if (cfg.algo.task_filter or cfg.algo.curriculum) else None
        self.pool = make_pool(cfg, model, tokenizer, make_env)  # Ray workers rebuild the policy from the config
        self.in_flight: dict[int, object] = {}  # step -> its submitted first sampling round
        self.sampled: dict[int, list] = {}  # step -> its first round, sampled (resolved for a checkpoint, or resumed)

    def step(self, step: int) -> dict:
        t0 = time.perf_counter()
        rollouts = self.sample(step)
        t1 = time.perf_counter()
        # canary groups (algo.canary_rate): the same weights, their own stream, measured and never trained on
        canaries = self.canaries(step, first_group=len(rollouts.sampled) // self.algo.group_size)
        t_canary = time.perf_counter() - t1
        batch = self.collate(rollouts.kept)
        extra = staleness_metrics(rollouts.kept, step)
        extra.update(self.advantages(batch, rollouts.kept))
        metrics = self.update(batch, step)
        t2 = time.perf_counter()
        extra.update(time_sample=t1 - t0, time_update=t2 - t1 - t_canary)
        if canaries:
            extra.update(canary_metrics(canaries), time_canary=t_canary)
        if self.env.grade_reruns > 1:  # gym/regrade.py: how often the k gradings agreed, per-test flakiness
            extra.update(grading_metrics(rollouts.kept))
        return dashboard_row(step, rollouts, metrics, extra)

    # ------------------------------------------------------------------ the stages

    def sample(self, step: int) -> StepRollouts:
        """The step's groups: its first round (submitted up to max_staleness steps ago, or now), then
        dynamic sampling's refill rounds (rollout/collect.py)."""
        self._fill_pipeline(step)
        first_round = self.sampled.pop(step) if step in self.sampled else self.pool.result(self.in_flight.pop(step))
        return collect_step(self.pool, self.tasks, self.algo, self.generator, self.task_stats, first_round,
                            self.env.rename_operands, self.env.shape_variants)

    def canaries(self, step: int, first_group: int) -> list:
        """The step's canary episodes (none with algo.canary_rate 0), groups numbered from first_group."""
        return sample_canaries(self.pool, self.cfg, step, first_group)

    def collate(self, trajectories: list[Trajectory]) -> Batch:
        return collate(trajectories, self.tokenizer.pad_id)

    def advantages(self, batch: Batch, trajectories: list[Trajectory]) -> dict:
        """Fill batch.advantages (KL-in-reward and overlong shaping, the group estimator, the per-turn
        term); returns the stage's dashboard metrics and how many groups carry a gradient."""
        extra = advantage_stage(batch, trajectories, self.algo, self.model, self.ref_model)
        grouped = batch.advantages.view(-1, self.algo.group_size)
        informative = grouped.abs().max(1).values > 0  # [groups]: a group is one task drawn this step
        extra["zero_adv_frac"] = float((~informative).float().mean())
        extra["tasks_with_gradient"] = int(informative.sum())
        return extra

    def update(self, batch: Batch, step: int) -> dict:
        """The learner's policy update on `batch`; raises NonFiniteUpdate after algo.max_nonfinite_skips
        skipped optimizer steps in a row."""
        factor = lr_factor(self.algo.lr_schedule, step, self.steps, self.algo.lr_warmup_steps, self.algo.lr_decay_steps)
        metrics = self.learner.update(batch, self.algo, self.generator, self.ref_model, factor)
        metrics["lr"] = self.algo.lr * factor
        self._count_nonfinite(step, metrics)
        return metrics

    # ------------------------------------------------------------------ the pipeline and its end

    def _fill_pipeline(self, step: int) -> None:
        """Publish the weights of version `step` and submit every batch up to step + max_staleness."""
        self.pool.set_weights(self.model, step)
        for ahead in range(step, step + self.max_staleness + 1):
            if ahead not in self.in_flight and ahead not in self.sampled and (ahead == step or ahead < self.steps):
                chosen = draw_step_tasks(self.tasks, self.algo, self.generator, self.task_stats,
                                         self.env.rename_operands, self.env.shape_variants)
                self.in_flight[ahead] = self.pool.submit(chosen, self.algo.group_size, self.algo.temperature,
                                                         self.generator)

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
        (run/distributed.py stops or disconnects them)."""
        self.pool.close()
        if stop_followers:
            self.learner.stop_followers()


def staleness_metrics(trajectories, step: int) -> dict:
    """Staleness (learner step - sampling weights' step) per trained policy token: mean and max."""
    tokens = torch.tensor([t.policy_tokens for t in trajectories], dtype=torch.float)
    lag = torch.tensor([step - t.policy_version for t in trajectories], dtype=torch.float)
    return {"staleness_mean": float((lag * tokens).sum() / tokens.sum().clamp_min(1)),
            "staleness_max": float(lag[tokens > 0].max()) if bool((tokens > 0).any()) else 0.0}
