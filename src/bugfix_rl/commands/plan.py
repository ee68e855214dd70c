"""`bugfix-rl plan`: how many seeds, tasks and episodes a comparison needs, and what a run costs.

Three questions, answered before anything is trained:

1. From two standard deviations (`seed_sd=`, `task_diff_sd=`): the book's power table (§19.9),
   seeds per arm and paired tasks for each effect, by a t-test (`test=t`, default) or a z-test
   (`test=z`, which reproduces the book's 3/36, 12/141, 70/881 from its 0.042 and 0.212).
2. From a pilot sweep (`dir=`): the same table from the sweep's measured sds, the seeds per arm that
   the seeds-and-tasks interval of `report` needs at each tasks x episodes design, and the minimum
   detectable effect (MDE) of every comparison already in the sweep.
3. `compute=true`: design-review question 19's GPU-hour arithmetic for `budget.*`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bugfix_rl.evaluate.power import VarianceComponents, seeds_needed, units_needed

TESTS = ("t", "z")


@dataclass
class StepCost:
    """GPU-hours of one RL step, by part (design-review question 19)."""

    update_flops: float  # 6N per token, every token of every episode
    recompute_flops: float  # old and reference log-probs: two more forward passes, 4N per token
    train_gpu_hours: float
    decode_gpu_hours: float  # policy tokens at the decode throughput
    prefill_flops: float  # 2N per non-policy token, each prefilled once (prefix cache)
    prefill_gpu_hours: float
    compute_bound_gpu_hours: float  # train + decode + prefill, inference fleet always busy
    generation_gpu_hours: float  # decode + prefill at the fleet's busy share
    step_gpu_hours: float  # train + generation
    run_gpu_hours: float  # step_gpu_hours x steps (no evaluations, failed runs or ablations)


def step_cost(budget) -> StepCost:
    """Question 19's estimate; attention FLOPs are ignored, so it is a lower bound at long contexts."""
    for name in ("params", "episodes_per_step", "tokens_per_episode", "steps", "peak_flops", "mfu",
                 "decode_tokens_per_gpu_second", "inference_busy"):
        if getattr(budget, name) <= 0:
            raise ValueError(f"budget.{name}={getattr(budget, name)} must be > 0")
    if not 0 <= budget.policy_tokens_per_episode <= budget.tokens_per_episode:
        raise ValueError("budget.policy_tokens_per_episode must lie in [0, budget.tokens_per_episode]")
    if budget.mfu > 1 or budget.inference_busy > 1:
        raise ValueError("budget.mfu and budget.inference_busy are shares: at most 1")
    n, episodes = budget.params, budget.episodes_per_step
    tokens = episodes * budget.tokens_per_episode
    update, recompute = 6 * n * tokens, 4 * n * tokens
    train_hours = (update + recompute) / (budget.peak_flops * budget.mfu) / 3600
    decode_hours = episodes * budget.policy_tokens_per_episode / budget.decode_tokens_per_gpu_second / 3600
    prefill = 2 * n * episodes * (budget.tokens_per_episode - budget.policy_tokens_per_episode)
    prefill_hours = prefill / (budget.peak_flops * budget.mfu) / 3600
    generation = (decode_hours + prefill_hours) / budget.inference_busy
    return StepCost(update, recompute, train_hours, decode_hours, prefill, prefill_hours,
                    train_hours + decode_hours + prefill_hours, generation, train_hours + generation,
                    (train_hours + generation) * budget.steps)


def compute_lines(budget) -> list[str]:
    cost = step_cost(budget)
    return [
        f"model N = {budget.params:.3g} parameters; {budget.episodes_per_step} episodes x {budget.tokens_per_episode:,.0f}"
        f" tokens ({budget.policy_tokens_per_episode:,.0f} decoded) per step; {budget.steps} steps",
        f"update 6N per token: {cost.update_flops:.3g} FLOPs; old + reference log-probs 4N: {cost.recompute_flops:.3g}",
        f"training at {budget.peak_flops:.3g} FLOP/s x MFU {budget.mfu:g}: {cost.train_gpu_hours:.2f} GPU-hours per step",
        f"decode {budget.episodes_per_step * budget.policy_tokens_per_episode:,.0f} policy tokens at"
        f" {budget.decode_tokens_per_gpu_second:g} tokens/s per GPU: {cost.decode_gpu_hours:.2f} GPU-hours",
        f"prefill 2N x {budget.episodes_per_step * (budget.tokens_per_episode - budget.policy_tokens_per_episode):.3g}"
        f" tokens: {cost.prefill_flops:.3g} FLOPs, {cost.prefill_gpu_hours:.2f} GPU-hours",
        f"compute-bound: {cost.compute_bound_gpu_hours:.2f} GPU-hours per step",
        f"with the inference fleet busy {budget.inference_busy:.0%} of the time: generation"
        f" {cost.generation_gpu_hours:.2f}, step {cost.step_gpu_hours:.2f}, run {cost.run_gpu_hours:,.0f} GPU-hours"
        " (attention FLOPs, evaluations, failed runs and ablations not included)",
    ]


def power_table_lines(seed_sd: float | None, task_diff_sd: float | None, cfg) -> list[str]:
    name = "z-test (the book's)" if cfg.test == "z" else "t-test (noncentral t)"
    lines = [f"{name}, alpha {cfg.alpha:g}, power {cfg.power:g}: seed sd of an arm mean"
             f" {'-' if seed_sd is None else f'{seed_sd:.3f}'}, sd of per-task differences"
             f" {'-' if task_diff_sd is None else f'{task_diff_sd:.3f}'}"]
    for effect in cfg.effects:
        seeds = units_needed(seed_sd, effect, True, cfg.test, cfg.alpha, cfg.power) if seed_sd else None
        tasks = units_needed(task_diff_sd, effect, False, cfg.test, cfg.alpha, cfg.power) if task_diff_sd else None
        lines.append(f"effect {effect:.2f}: seeds per arm {'-' if seeds is None else seeds} |"
                     f" paired tasks {'-' if tasks is None else tasks}")
    return lines


def design_lines(parts: VarianceComponents, cfg) -> list[str]:
    lines = [f"variance parts of one seed's per-task pass rate: seed {parts.seed:.4f}, arm x task"
             f" {parts.interaction:.4f}, seed x task {parts.seed_task:.4f}, episodes {parts.episode:.4f}"
             f" (at {parts.episodes} episodes)",
             "seeds per arm for report's seeds-and-tasks interval (t, alpha"
             f" {cfg.alpha:g}, power {cfg.power:g}); '-': more than 1000 seeds (add tasks):"]
    header = "tasks x episodes  " + "  ".join(f"effect {e:.2f}" for e in cfg.effects)
    lines.append(header)
    for tasks in cfg.tasks:
        for episodes in cfg.episodes:
            cells = [seeds_needed(parts, tasks, episodes, e, cfg.alpha, cfg.power) for e in cfg.effects]
            lines.append(f"{tasks:>5} x {episodes:<9}  " + "  ".join(f"{'-' if c is None else c:>11}" for c in cells))
    return lines


def check_plan(cfg) -> None:
    if cfg.test not in TESTS:
        raise ValueError(f"test={cfg.test!r} is not allowed; valid values: {', '.join(TESTS)}")
    if not (0 < cfg.alpha < 1 and 0 < cfg.power < 1):
        raise ValueError(f"alpha and power must lie in (0, 1), got {cfg.alpha}, {cfg.power}")
    if any(e == 0 for e in cfg.effects) or not cfg.effects:
        raise ValueError("effects must be non-zero differences, e.g. effects=[0.1,0.05]")
    if any(t < 2 for t in cfg.tasks) or any(n < 1 for n in cfg.episodes):
        raise ValueError("tasks must be >= 2 and episodes >= 1")
    if cfg.seed_sd < 0 or cfg.task_diff_sd < 0:
        raise ValueError("seed_sd and task_diff_sd must be >= 0")
    if not cfg.compute and not cfg.dir and not (cfg.seed_sd or cfg.task_diff_sd):
        raise ValueError("give a pilot sweep (dir=<multirun dir>), or seed_sd= and/or task_diff_sd=, or compute=true")


def plan_lines(cfg) -> list[str]:
    """Everything `bugfix-rl plan` prints (ValueError, or ReportError for a bad dir, on bad input)."""
    check_plan(cfg)
    if cfg.compute:
        return compute_lines(cfg.budget)
    if not cfg.dir:
        return power_table_lines(cfg.seed_sd or None, cfg.task_diff_sd or None, cfg)
    from bugfix_rl.evaluate.ablation import build_report

    report = build_report(cfg.dir, cfg.reference)
    power = report.power
    lines = [f"pilot: {cfg.dir}, {len(report.runs)} runs, {len(report.rows)} arms, {report.tasks} tasks x"
             f" {report.episodes} episodes, reference {report.reference}"]
    if power.get("left_out"):
        lines.append(f"left out of the variances (at the floor or ceiling): {', '.join(power['left_out'])}")
    lines += power_table_lines(power["seed_sd"], power["task_diff_sd"], cfg)
    if power["components"]:  # the report's own split of the sweep's variance (no arm with 2 seeds: none)
        lines += design_lines(VarianceComponents(**power["components"]), cfg)
    lines.append("minimum detectable effect (80% power) of each comparison in this sweep:")
    for row in report.rows[1:]:
        mde = "n/a (one seed)" if row.mde is None else f"{row.mde:.3f}"
        lines.append(f"  {row.arm} - {report.reference}: {row.diff[0]:+.3f} [{row.diff[1]:+.3f}, {row.diff[2]:+.3f}],"
                     f" MDE {mde}")
    return lines


def plan_command(cfg) -> list[str]:
    lines = plan_lines(cfg)
    for line in lines:
        print(line)
    return lines
