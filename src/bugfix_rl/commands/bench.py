"""`bugfix-rl bench [train overrides]`: the configured rollout path timed side by side with one process.

Two blocks, each interleaving the two paths repeat by repeat (so a load change on a shared machine
hits both), printing best and median seconds and the ratio single-process / configured:

1. sampling + grading of one step's batch (prompts_per_step x group_size episodes, the same tasks
   and generator seed for both paths), through `rollout/pool.py`'s pools;
2. (bench.steps > 0) whole training steps: the synchronous in-process trainer vs the configured one
   (rollout.workers, rollout.max_staleness), median seconds per step over bench.steps steps.

The single-process path uses bench.baseline_threads torch threads (the train default, 2); the
configured path uses `threads` in this process plus rollout.worker_threads per Ray actor. Pool
start-up (Ray, and its actors built and holding the weights) is timed apart and excluded from the
per-step figures.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time

import torch
from rich.table import Table

from bugfix_rl.commands.configured_policy import configured_policy
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.kernels import set_torch_threads
from bugfix_rl.present.terminal import output_console
from bugfix_rl.rollout.collect import draw_step_tasks
from bugfix_rl.rollout.pool import InlinePool, make_pool


def _sampling_seconds(pool, tasks, algo, seed: int) -> tuple[float, int]:
    chosen = draw_step_tasks(tasks, algo, torch.Generator().manual_seed(seed))
    start = time.perf_counter()
    episodes = pool.result(pool.submit(chosen, algo.group_size, algo.temperature, torch.Generator().manual_seed(seed)))
    return time.perf_counter() - start, len(episodes)


def _step_seconds(cfg, model, tokenizer, make_env, steps: int) -> float:
    """Median seconds per training step after one warm-up step (the pool's start-up not counted)."""
    from bugfix_rl.run.trainer import Trainer

    set_torch_threads(cfg.threads)
    trainer = Trainer(cfg, copy.deepcopy(model), tokenizer, make_env, torch.Generator().manual_seed(cfg.seed))
    try:
        trainer.step(0)
        seconds = []
        for step in range(1, steps + 1):
            start = time.perf_counter()
            trainer.step(step)
            seconds.append(time.perf_counter() - start)
    finally:
        trainer.close()
    return statistics.median(seconds)


def _path_name(cfg) -> str:
    rollout = cfg.rollout
    if rollout.workers == 0:
        return f"in-process, {cfg.threads} threads"
    if rollout.engine == "local":
        return f"{rollout.workers} in-process shards, {cfg.threads} threads"
    return f"{rollout.workers} ray workers x {rollout.worker_threads} thread"


def _summary(seconds: list[float]) -> str:
    return f"best {min(seconds):.3f} s, median {statistics.median(seconds):.3f} s"


def bench_command(cfg) -> dict:
    from bugfix_rl.recipes.cold_start import cold_start

    from bugfix_rl.progress import PhaseProgress

    console = output_console()
    progress = PhaseProgress(bars=cfg.logger.console)  # a line on stderr before each timed block (issue 38)
    bench = cfg.bench
    single_threads = bench.baseline_threads
    # the timed trainers run bench.steps + 1 steps, so the pipeline looks ahead on every timed step but the last
    cfg = dataclasses.replace(cfg, steps=bench.steps + 1)
    sync_cfg = dataclasses.replace(cfg, threads=single_threads,
                                   rollout=dataclasses.replace(cfg.rollout, workers=0, max_staleness=0))
    result = {}
    with configured_policy(cfg) as (model, tokenizer, make_env):
        if cfg.cold_start.enabled:
            start = time.perf_counter()
            cold_start(cfg, model, tokenizer, make_env)
            console.print(f"cold start (SFT, not timed below): {time.perf_counter() - start:.1f} s")
        model.eval()
        tasks = make_tasks("train")
        configured_name = _path_name(cfg)
        single_name = f"in-process, {single_threads} threads"
        start = time.perf_counter()
        pool = make_pool(cfg, model, tokenizer, make_env)  # Ray workers say what they start (ray_pool.py)
        result["pool_startup_s"] = time.perf_counter() - start
        inline = InlinePool(model, tokenizer, make_env)
        times = {single_name: [], configured_name: []}
        episodes = 0
        batch = cfg.algo.prompts_per_step * cfg.algo.group_size
        try:
            with progress.phase(f"bench: timing sampling + grading of one step's batch ({batch} episodes, env="
                                f"{cfg.env.name}), {single_name} vs {configured_name}: a warm-up, then "
                                f"{bench.repeats} repeats of each", done="sampling timed"), \
                    progress.stage("sampling blocks", 2 * (bench.repeats + 1)) as advance:
                for repeat in range(-1, bench.repeats):  # repeat -1 warms both paths up (caches, sandbox forks)
                    for name, path, threads in ((single_name, inline, single_threads),
                                                (configured_name, pool, cfg.threads)):
                        set_torch_threads(threads)
                        seconds, episodes = _sampling_seconds(path, tasks, cfg.algo, bench.seed + max(repeat, 0))
                        if repeat >= 0:
                            times[name].append(seconds)
                        advance(name)
        finally:
            pool.close()
        ratio = min(times[single_name]) / min(times[configured_name])
        per_repeat = sorted(a / b for a, b in zip(times[single_name], times[configured_name]))
        result["sampling"] = {"episodes": episodes, "times": times, "ratio_best": ratio, "ratio_per_repeat": per_repeat}
        table = Table(title=f"sampling + grading one step's batch: {episodes} episodes, env={cfg.env.name}, "
                            f"{bench.repeats} repeats")
        for column in ("path", "seconds", "episodes / s"):
            table.add_column(column)
        for name, seconds in times.items():
            table.add_row(name, _summary(seconds), f"{episodes / min(seconds):.1f}")
        console.print(table)
        console.print(f"ratio single-process / {configured_name}: best {ratio:.2f}x; per repeat (same tasks "
                      f"and seed) median {statistics.median(per_repeat):.2f}x, range {per_repeat[0]:.2f}-"
                      f"{per_repeat[-1]:.2f}x; pool start-up {result['pool_startup_s']:.1f} s (excluded)", soft_wrap=True)
        if bench.steps > 0 and (cfg.rollout.workers or cfg.rollout.max_staleness or cfg.threads != single_threads):
            sync_name = "sync, " + single_name
            step_times = {sync_name: [], "configured": []}
            with progress.phase(f"bench: timing training steps, {sync_name} vs {configured_name} with max_staleness="
                                f"{cfg.rollout.max_staleness}: {bench.repeats} repeats of a warm-up step and "
                                f"{bench.steps} timed steps each", done="training steps timed"), \
                    progress.stage("step blocks", 2 * bench.repeats) as advance:
                for _ in range(bench.repeats):
                    step_times[sync_name].append(_step_seconds(sync_cfg, model, tokenizer, make_env, bench.steps))
                    advance(sync_name)
                    step_times["configured"].append(_step_seconds(cfg, model, tokenizer, make_env, bench.steps))
                    advance("configured")
            step_ratio = min(step_times[sync_name]) / min(step_times["configured"])
            result["steps"] = {"times": step_times, "ratio_best": step_ratio, "steps": bench.steps}
            label = f"{configured_name}, max_staleness={cfg.rollout.max_staleness}"
            console.print(f"training step (median of {bench.steps} steps, {bench.repeats} repeats): "
                          f"{sync_name}: {_summary(step_times[sync_name])}; "
                          f"{label}: {_summary(step_times['configured'])}; ratio of bests {step_ratio:.2f}x",
                          soft_wrap=True)
    return result
