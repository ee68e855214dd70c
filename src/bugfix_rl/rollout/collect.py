"""One step's rollouts: pick tasks, build renamed envs, sample G episodes per task.

Dynamic sampling (DAPO) resamples groups whose rewards are all equal (they carry no gradient) with
fresh tasks, up to max_sample_rounds rounds, and reports how many extra episodes that cost. Task
filtering and the curriculum reweight which training tasks are drawn, from their recent pass rates.
With algo.mask_infra, episodes whose reward the infrastructure decided (rollout/env_errors.py) count
in neither: they are not a real 0 of the task's pass rate, and a group is degenerate when the episodes
left after masking agree or are fewer than two (algo/infra_mask.py gives it no gradient either).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

import torch

from bugfix_rl.gym.shape_variants import shape_variant
from bugfix_rl.gym.tasks import OPERAND_POOL, Task, base_task_name, operand_names, with_renamed_operands
from bugfix_rl.rollout.env_errors import infrastructure_failure
from bugfix_rl.rollout.pool import InlinePool
from bugfix_rl.types import Trajectory


@dataclass
class StepRollouts:
    """kept: the trajectories trained on (groups of G, contiguous); sampled: every episode sampled
    this step (dynamic sampling's discarded groups included); rounds: sampling rounds used."""

    kept: list[Trajectory]
    sampled: list[Trajectory]
    rounds: int = 1


@dataclass
class TaskStats:
    """Exponential moving pass rate per task name, for filtering and the curriculum."""

    rate: dict[str, float] = field(default_factory=dict)
    decay: float = 0.5

    def update(self, trajectories: list[Trajectory], mask_infra: bool = True) -> None:
        """Fold one step's episodes into the moving rates; with mask_infra, episodes whose reward the
        infrastructure decided are left out (a task with only such episodes keeps its rate)."""
        by_task: dict[str, list[float]] = {}
        for t in trajectories:
            if mask_infra and infrastructure_failure(t.info):
                continue
            by_task.setdefault(base_task_name(t.info.task), []).append(float(t.info.success))  # not a shaped reward
        for name, rewards in by_task.items():
            mean = sum(rewards) / len(rewards)
            old = self.rate.get(name)
            self.rate[name] = mean if old is None else self.decay * old + (1 - self.decay) * mean

    def weights(self, tasks: list[Task], task_filter: bool, curriculum: bool) -> torch.Tensor:
        rates = torch.tensor([self.rate.get(t.name, 0.5) for t in tasks])
        w = torch.ones(len(tasks))
        if curriculum:
            w = (1.0 - rates) + 0.05  # unsolved tasks drawn more, solved ones rarely but not never
        if task_filter:
            informative = (rates > 0.0) & (rates < 1.0)
            if informative.sum() > 0:
                w = w * informative
        return w


def degenerate(group: list[Trajectory], mask_infra: bool = True) -> bool:
    """A group with no task signal: its rewards all agree, counting with mask_infra only the episodes
    the infrastructure did not decide (then fewer than two such episodes is degenerate too)."""
    rewards = [t.reward for t in group if not (mask_infra and infrastructure_failure(t.info))]
    return len(rewards) < 2 or len(set(rewards)) == 1


def draw_tasks(tasks: list[Task], n: int, weights: torch.Tensor, generator: torch.Generator) -> list[Task]:
    """n distinct tasks (or all, if n >= len(tasks)); uniform weights use randperm (the book's stream).

    Zero-weight (filtered-out) tasks are drawn only when fewer than n tasks have a positive weight,
    and then uniformly (torch.multinomial without replacement needs n positive weights).
    """
    n = min(n, len(tasks))
    if bool((weights == weights[0]).all()):
        index = torch.randperm(len(tasks), generator=generator)[:n]
    else:
        positive = int((weights > 0).sum())
        index = torch.multinomial(weights, min(n, positive), replacement=False, generator=generator)
        if positive < n:
            rest = (weights <= 0).nonzero().squeeze(1)
            index = torch.cat([index, rest[torch.randperm(len(rest), generator=generator)[: n - positive]]])
    return [tasks[i] for i in index.tolist()]


def with_renamed_operands_drawn(tasks: list[Task], generator: torch.Generator) -> list[Task]:
    """Each task with its parameters and locals renamed to names drawn from OPERAND_POOL (data
    augmentation for RL: a policy must copy names from what it read, it cannot recall them)."""
    renamed = []
    for task in tasks:
        names = [OPERAND_POOL[i] for i in torch.randperm(len(OPERAND_POOL), generator=generator).tolist()]
        tag = ".".join(names[:len(operand_names(task))])  # a name per renaming (gym/ops.py caches by name)
        renamed.append(with_renamed_operands(task, names, tag))
    return renamed


def sample_groups(model, tokenizer, tasks: list[Task], group_size: int, make_env: Callable, temperature: float,
                  generator: torch.Generator, first_group: int = 0) -> list[Trajectory]:
    """group_size renamed episodes of each task, in one batch; groups numbered from first_group."""
    return InlinePool(model, tokenizer, make_env).submit(tasks, group_size, temperature, generator, first_group)


def with_shape_variants_drawn(tasks: list[Task], rate: float, generator: torch.Generator) -> list[Task]:
    """Each task replaced, with probability `rate`, by a shape variant of it (gym/shape_variants.py:
    one operand or literal of its body changed, tests recomputed from its fix), drawn from `generator`."""
    out = []
    for task in tasks:
        if float(torch.rand((), generator=generator)) < rate:
            rng = random.Random(int(torch.randint(2**62, (), generator=generator)))
            task = shape_variant(task, rng) or task
        out.append(task)
    return out


def augmented(tasks: list[Task], generator: torch.Generator, rename_operands: bool = False,
              shape_variants: float = 0.0) -> list[Task]:
    """RL data augmentation of drawn training tasks: shape variants first (env.shape_variants), then
    renamed operands (env.rename_operands). Neither touches `generator` when it is off."""
    if shape_variants > 0:
        tasks = with_shape_variants_drawn(tasks, shape_variants, generator)
    return with_renamed_operands_drawn(tasks, generator) if rename_operands else tasks


def draw_step_tasks(tasks: list[Task], algo, generator: torch.Generator, task_stats: TaskStats | None = None,
                    rename_operands: bool = False, shape_variants: float = 0.0) -> list[Task]:
    """The step's tasks (prompts_per_step of them), weighted by filtering / the curriculum if on;
    augmented (one copy per group) as `augmented` says."""
    chosen = draw_tasks(tasks, algo.prompts_per_step, _task_weights(tasks, algo, task_stats), generator)
    return augmented(chosen, generator, rename_operands, shape_variants)


def _task_weights(tasks: list[Task], algo, task_stats: TaskStats | None) -> torch.Tensor:
    return task_stats.weights(tasks, algo.task_filter, algo.curriculum) if task_stats else torch.ones(len(tasks))


def collect_step(pool, tasks: list[Task], algo, generator: torch.Generator, task_stats: TaskStats | None = None,
                 first_round: list[Trajectory] | None = None, rename_operands: bool = False,
                 shape_variants: float = 0.0) -> StepRollouts:
    """One step's rollouts through `pool` (rollout/pool.py).

    first_round: the step's first sampling round when it was submitted earlier (bounded staleness,
    run/trainer.py); otherwise the tasks are drawn and sampled now. Dynamic sampling's refill rounds are
    sampled now, with the pool's current weights.
    """
    G = algo.group_size
    if first_round is None:
        chosen = draw_step_tasks(tasks, algo, generator, task_stats, rename_operands, shape_variants)
        first_round = pool.result(pool.submit(chosen, G, algo.temperature, generator))
    sampled = first_round
    groups = [sampled[i:i + G] for i in range(0, len(sampled), G)]
    rounds = 1
    if algo.dynamic_sampling:
        weights = _task_weights(tasks, algo, task_stats)
        while rounds < algo.max_sample_rounds:
            slots = [i for i, g in enumerate(groups) if degenerate(g, algo.mask_infra)]
            if not slots:
                break
            refill = draw_tasks(tasks, len(slots), weights, generator)
            refill = augmented(refill, generator, rename_operands, shape_variants)
            fresh = pool.result(pool.submit(refill, G, algo.temperature, generator, first_group=len(sampled) // G))
            sampled = sampled + fresh
            for slot, start in zip(slots, range(0, len(fresh), G)):
                candidate = fresh[start:start + G]
                if not degenerate(candidate, algo.mask_infra):
                    groups[slot] = candidate
            rounds += 1
    kept = [t for g in groups for t in g]
    if task_stats is not None:
        task_stats.update(sampled, algo.mask_infra)
    return StepRollouts(kept, sampled, rounds)
