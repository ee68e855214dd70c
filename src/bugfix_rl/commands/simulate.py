"""A discrete-event simulator of the rollout pipeline, to size a cluster before paying for it.

Model (all times in seconds):
  * An episode runs `n` turns, n = round(turns * X) with X lognormal of mean 1 and sigma tail_sigma
    (sigma 0.67 puts 5% of episodes above 3x the median, design-review question 18). Each turn decodes
    tokens_per_turn tokens at decode_tokens_per_second and makes one tool call whose latency is
    exponential with mean tool_seconds (their sum over n calls is drawn as one Gamma(n, tool_seconds)).
  * It first needs a fresh container. A warm pool keeps warm_pool containers started ahead; taking one
    starts its replacement (startup_seconds), and an episode that finds none ready takes the one that
    is ready soonest (a cold start when warm_pool = 0). The wait is part of the episode's duration.
  * `workers` episodes run at once (an inference-engine sequence slot plus a container each).
  * The trainer needs episodes_per_step (B) finished episodes per step and takes update_seconds.

One admission rule covers both modes. Policy version v = updates finished; trainer step k turns
version k into k + 1 and trains on episodes started under versions >= k - max_staleness. A worker
starts an episode only while trained + pending < (v + max_staleness + 1) * B (pending: started, not
yet trained), so generation runs ahead of the learner by at most max_staleness steps.
max_staleness = 0 is synchronous RL: exactly B episodes start per step, all under the step's
weights, and generation waits for the update. With max_staleness >= 1 (asynchronous) the trainer
takes the B earliest-finished episodes; one that finishes so late that it would exceed the bound is
dropped (counted: its worker time is wasted, and long episodes are dropped most, so the trained batch
is biased towards short ones; `trained_vs_started_duration` shows it). Partial rollouts (an episode
continuing under new weights) are not modelled.

Only the standard library is used (heapq, random, statistics): no torch.
"""

from __future__ import annotations

import heapq
import random
import statistics
from dataclasses import dataclass


def check_workload(w) -> None:
    """ValueError (one line naming the field) for a workload the simulator cannot run.

    `w` is a SimulateConfig (config/commands.py, where every field is documented) or anything with its fields.
    """
    for name in ("workers", "episodes_per_step", "steps", "turns", "decode_tokens_per_second"):
        if getattr(w, name) <= 0:
            raise ValueError(f"{name}={getattr(w, name)!r} must be > 0")
    for name in ("update_seconds", "tail_sigma", "tokens_per_turn", "tool_seconds", "startup_seconds",
                 "warm_pool", "max_staleness"):
        if getattr(w, name) < 0:
            raise ValueError(f"{name}={getattr(w, name)!r} must be >= 0")


def turn_seconds(w) -> float:
    """Mean wall time of one turn: decoding plus one tool call."""
    return w.tokens_per_turn / w.decode_tokens_per_second + w.tool_seconds


def mean_episode_seconds(w, cold_start: bool = True) -> float:
    """Expected episode duration from the inputs (turns x turn time, + start-up when it is paid)."""
    return w.turns * turn_seconds(w) + (w.startup_seconds if cold_start else 0.0)


def littles_law_concurrency(episodes: float, per_seconds: float, mean_duration_seconds: float) -> float:
    """L = lambda * W: episodes in flight needed to finish `episodes` every `per_seconds`."""
    return episodes / per_seconds * mean_duration_seconds


@dataclass
class SimResult:
    """What one simulated run measured (rates per hour, utilisations as fractions of capacity)."""

    mode: str
    max_staleness: int
    hours: float  # simulated wall time until the last update finished
    steps: int
    trained: int  # episodes trained on (steps * B)
    completed: int  # episodes finished (trained, dropped, or waiting at the end)
    dropped: int  # finished too late for the staleness bound
    episodes_per_hour: float  # trained episodes per hour
    steps_per_hour: float
    worker_utilisation: float  # time slots held an episode / (workers * wall time)
    useful_utilisation: float  # same, counting only episodes that were trained
    trainer_utilisation: float  # update time / wall time
    mean_staleness: float  # over trained episodes: trainer step - version the episode started under
    max_staleness_seen: int
    warm_hit_rate: float  # episodes that found a warm container ready
    startup_share: float  # share of worker busy time spent waiting for a container
    mean_duration_min: float  # completed episodes, container wait included
    p95_duration_min: float
    trained_vs_started_duration: float  # mean duration of trained / of all completed episodes
    littles_l: float  # time-average episodes in flight (busy time / wall time)
    littles_lambda_w: float  # completion rate (per second) * mean duration (seconds)
    max_rate_per_hour: float  # workers / mean duration: no schedule can beat it


class _Episode:
    __slots__ = ("version", "start", "end", "warm")

    def __init__(self, version: int, start: float, end: float, warm: bool):
        self.version, self.start, self.end, self.warm = version, start, end, warm


def _draw_duration(w, rng: random.Random) -> float:
    """Agent interaction time of one episode (container wait excluded): from the turn model, or drawn
    from a calibration's measured durations (w.episode_seconds)."""
    if w.episode_seconds:
        return rng.choice(w.episode_seconds)
    sigma = w.tail_sigma
    scale = rng.lognormvariate(-sigma * sigma / 2, sigma) if sigma > 0 else 1.0  # mean 1
    n = max(1, round(w.turns * scale))
    tools = rng.gammavariate(n, w.tool_seconds) if w.tool_seconds > 0 else 0.0
    return n * w.tokens_per_turn / w.decode_tokens_per_second + tools


def simulate(w, max_staleness: int | None = None) -> SimResult:
    """Run the pipeline until `w.steps` updates have finished; max_staleness overrides w's (0 = sync).

    Episode i's duration depends only on (seed, i): episodes start in index order in every mode, and
    durations come from their own random stream, so sync and async see the same episodes.
    """
    check_workload(w)
    bound = w.max_staleness if max_staleness is None else max_staleness
    B = w.episodes_per_step
    rng = random.Random(w.seed)
    pool = [0.0] * w.warm_pool  # min-heap of the times the pool's containers are (or will be) ready
    events: list[tuple[float, int, int, _Episode | None]] = []  # (time, order, kind, episode)
    FINISH, UPDATE_DONE = 0, 1
    order = 0
    now = 0.0
    free = w.workers
    version = trained = pending = dropped = 0
    trainer_busy = False
    buffer: list[_Episode] = []  # finished, not yet trained, in finishing order
    done: list[_Episode] = []
    trained_eps: list[_Episode] = []
    staleness: list[int] = []
    wait_total = update_total = 0.0

    def start_episodes() -> None:
        nonlocal free, pending, order, wait_total
        while free > 0 and trained + pending < (version + bound + 1) * B:
            if pool:
                ready = heapq.heappop(pool)
                heapq.heappush(pool, now + w.startup_seconds)  # its replacement starts now
                wait = max(0.0, ready - now)
            else:
                wait = w.startup_seconds
            episode = _Episode(version, now, now + wait + _draw_duration(w, rng), wait == 0.0)
            wait_total += wait
            free -= 1
            pending += 1
            order += 1
            heapq.heappush(events, (episode.end, order, FINISH, episode))

    def try_train() -> None:
        nonlocal buffer, pending, trained, dropped, trainer_busy, order, update_total
        if trainer_busy or version >= w.steps:
            return
        fresh = [e for e in buffer if version - e.version <= bound]
        dropped += len(buffer) - len(fresh)
        pending -= len(buffer) - len(fresh)
        buffer = fresh
        if len(buffer) < B:
            return
        batch, buffer = buffer[:B], buffer[B:]
        pending -= B
        trained += B
        trained_eps.extend(batch)
        staleness.extend(version - e.version for e in batch)
        trainer_busy = True
        update_total += w.update_seconds
        order += 1
        heapq.heappush(events, (now + w.update_seconds, order, UPDATE_DONE, None))

    start_episodes()
    while version < w.steps:
        now, _, kind, episode = heapq.heappop(events)
        if kind == FINISH:
            free += 1
            buffer.append(episode)
            done.append(episode)
        else:
            version += 1
            trainer_busy = False
        try_train()
        start_episodes()
    in_flight = [e for _, _, kind, e in events if kind == FINISH]
    busy = sum(min(e.end, now) - e.start for e in done + in_flight)
    useful = sum(e.end - e.start for e in trained_eps)
    durations = [e.end - e.start for e in done]
    mean_duration = statistics.fmean(durations)
    p95 = statistics.quantiles(durations, n=20)[-1] if len(durations) > 1 else mean_duration
    capacity = w.workers * now
    return SimResult(
        mode="sync" if bound == 0 else "async", max_staleness=bound, hours=now / 3600, steps=version,
        trained=trained, completed=len(done), dropped=dropped,
        episodes_per_hour=trained / now * 3600, steps_per_hour=version / now * 3600,
        worker_utilisation=busy / capacity, useful_utilisation=useful / capacity,
        trainer_utilisation=update_total / now, mean_staleness=statistics.fmean(staleness),
        max_staleness_seen=max(staleness),
        warm_hit_rate=sum(e.warm for e in done + in_flight) / len(done + in_flight),
        startup_share=wait_total / busy if busy else 0.0,
        mean_duration_min=mean_duration / 60,
        p95_duration_min=p95 / 60,
        trained_vs_started_duration=statistics.fmean(e.end - e.start for e in trained_eps) / mean_duration,
        littles_l=busy / now, littles_lambda_w=len(done) / now * mean_duration,
        max_rate_per_hour=w.workers / mean_duration * 3600)


ROWS = (  # (label, SimResult field, format)
    ("trained episodes / hour", "episodes_per_hour", ".0f"),
    ("steps / hour", "steps_per_hour", ".2f"),
    ("worker utilisation (busy)", "worker_utilisation", ".1%"),
    ("worker utilisation (trained episodes only)", "useful_utilisation", ".1%"),
    ("trainer utilisation", "trainer_utilisation", ".1%"),
    ("mean staleness of trained episodes (steps)", "mean_staleness", ".2f"),
    ("max staleness seen", "max_staleness_seen", "d"),
    ("episodes dropped as too stale", "dropped", "d"),
    ("warm-pool hit rate", "warm_hit_rate", ".1%"),
    ("container wait / busy time", "startup_share", ".1%"),
    ("episode duration, mean (min)", "mean_duration_min", ".1f"),
    ("episode duration, p95 (min)", "p95_duration_min", ".1f"),
    ("trained / all episodes, mean duration", "trained_vs_started_duration", ".2f"),
    ("Little: L = mean episodes in flight", "littles_l", ".1f"),
    ("Little: lambda x W", "littles_lambda_w", ".1f"),
    ("bound: workers / mean duration (per hour)", "max_rate_per_hour", ".0f"),
    ("simulated hours", "hours", ".2f"),
)


def calibrated(cfg, rows: list[dict], run_workers: int, run_episodes: int):
    """`cfg` set to a run's measured figures: rows are its metrics.jsonl rows (the first, which warms
    caches and sandboxes up, is left out), run_workers its rollout.workers (0: one process),
    run_episodes its episodes per step. A step that sampled E episodes on W workers in S seconds gives
    episodes of S * W / E seconds each (a worker runs its share one after another)."""
    import dataclasses

    timed = rows[1:] if len(rows) > 1 else rows
    if not timed or any("time_sample" not in r or "time_update" not in r for r in timed):
        raise ValueError("calibrate: the run's metrics.jsonl has no timed steps (time_sample, time_update)")
    per_episode = [r["time_sample"] * max(1, run_workers) / r.get("sampled_episodes", run_episodes) for r in timed]
    return dataclasses.replace(cfg, episode_seconds=per_episode, update_seconds=statistics.median(
        r["time_update"] for r in timed), episodes_per_step=run_episodes, startup_seconds=0.0, warm_pool=0,
        tool_seconds=0.0)


def read_calibration(cfg):
    """SimulateConfig `cfg` calibrated from the run that cfg.calibrate names (calibrated())."""
    import json
    from pathlib import Path

    path = Path(cfg.calibrate)
    run_dir = path.parent if path.is_file() else path
    metrics, record = run_dir / "metrics.jsonl", run_dir / "eval.json"
    if not metrics.is_file() or not record.is_file():
        raise ValueError(f"calibrate: {run_dir} is not a finished run dir (metrics.jsonl and eval.json)")
    try:
        train_cfg = json.loads(record.read_text())["config"]["resolved"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"calibrate: {record} is not an eval.json with the run's resolved config") from None
    if train_cfg["rollout"]["max_staleness"]:
        raise ValueError("calibrate: use a synchronous run (rollout.max_staleness=0): an async step's sampling "
                         "time overlaps the update")
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    episodes = train_cfg["algo"]["prompts_per_step"] * train_cfg["algo"]["group_size"]
    return calibrated(cfg, rows, train_cfg["rollout"]["workers"], episodes)


def seconds_per_step(result: SimResult) -> float:
    return result.hours * 3600 / result.steps


def simulate_command(cfg, console=None) -> tuple[SimResult, SimResult]:
    """`bugfix-rl simulate [overrides]`: sync vs async side by side, and the Little's-law sizing."""
    from rich.console import Console

    from bugfix_rl.present.terminal import output_console
    from rich.table import Table

    console = console or output_console()
    if cfg.calibrate:
        cfg = read_calibration(cfg)
        console.print(f"calibrated from {cfg.calibrate}: {len(cfg.episode_seconds)} steps, "
                      f"{statistics.fmean(cfg.episode_seconds):.4f} s per episode (mean), update "
                      f"{cfg.update_seconds:.3f} s, {cfg.episodes_per_step} episodes per step", soft_wrap=True)
    check_workload(cfg)
    if cfg.max_staleness < 1:
        raise ValueError(f"max_staleness={cfg.max_staleness} must be >= 1 (it bounds the async column; sync is 0)")
    sync, asynchronous = simulate(cfg, 0), simulate(cfg)
    table = Table(title=f"{cfg.workers} workers, {cfg.episodes_per_step} episodes/step, update"
                        f" {cfg.update_seconds / 60:g} min, warm pool {cfg.warm_pool}, {cfg.steps} steps")
    table.add_column("")
    table.add_column("sync", justify="right")
    table.add_column(f"async (max_staleness={asynchronous.max_staleness})", justify="right")
    for label, key, fmt in ROWS:
        table.add_row(label, format(getattr(sync, key), fmt), format(getattr(asynchronous, key), fmt))
    table.add_row("seconds per step", f"{seconds_per_step(sync):.3f}", f"{seconds_per_step(asynchronous):.3f}")
    console.print(table)
    if cfg.calibrate:
        return sync, asynchronous
    cold, warm = mean_episode_seconds(cfg, True), mean_episode_seconds(cfg, False)
    target, B = cfg.target_step_minutes * 60, cfg.episodes_per_step
    in_flight_cold, in_flight_warm = (littles_law_concurrency(B, target, W) for W in (cold, warm))
    lines = [
        f"episode: {cfg.turns:g} turns x {turn_seconds(cfg):g} s ({cfg.tokens_per_turn:g} tokens at"
        f" {cfg.decode_tokens_per_second:g} tok/s + {cfg.tool_seconds:g} s tool) = {warm / 60:.1f} min,"
        f" + {cfg.startup_seconds / 60:.1f} min cold start = {cold / 60:.1f} min (tail sigma {cfg.tail_sigma:g})",
        f"Little's law, {B} episodes per {cfg.target_step_minutes:g} min: L = lambda x W =",
        f"  {in_flight_cold:.1f} concurrent episodes with cold starts (W {cold / 60:.1f} min)",
        f"  {in_flight_warm:.1f} with a warm pool (W {warm / 60:.1f} min), whose refills need"
        f" {littles_law_concurrency(B, target, cfg.startup_seconds):.1f} containers starting at once",
    ]
    for line in lines:
        console.print(line, soft_wrap=True)
    return sync, asynchronous
