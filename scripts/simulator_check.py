"""The rollout simulator, calibrated on this machine, against `bugfix-rl bench` measured right after.

    python scripts/simulator_check.py [--steps 8] [--bench-steps 6] [--repeats 2] [--out DIR]

1. One synchronous `bugfix-rl train +exp=tools` run of --steps steps with 1 Ray worker (threads=1,
   algo.tis_cap=2 so the update does what the async one does) is the calibration: its metrics.jsonl
   gives the seconds per episode and the update time (simulate.calibrated).
2. `bugfix-rl simulate calibrate=<that run>` predicts seconds per step, sync and async
   (max_staleness=1), at 1 and 2 Ray workers: the 2-worker figures are predictions from 1-worker data.
3. `bugfix-rl bench` measures the same four configurations (median seconds per training step, best of
   --repeats), one after another, right after.

Prints one table (predicted, measured, measured / predicted) and writes it as JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)

from bugfix_rl.cli import compose_train
from bugfix_rl.commands.bench import bench_command
from bugfix_rl.commands.simulate import read_calibration, seconds_per_step, simulate
from bugfix_rl.config import SimulateConfig

COMMON = ["exp=tools", "threads=1", "rollout.worker_threads=1", "algo.tis_cap=2.0"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="steps of the calibration run")
    parser.add_argument("--bench-steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("outputs/simulator_check"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    run_dir = args.out / "calibration_run"
    started = time.perf_counter()
    if not (run_dir / "eval.json").is_file():  # a finished calibration run is reused (rerun: delete it)
        subprocess.run([sys.executable, "-m", "bugfix_rl.cli", "train", *COMMON, "rollout.workers=1",
                        f"steps={args.steps}", "preflight=false", "eval.test=false", "eval.heldout_n=0",
                        "eval.n_val=1", "eval.ckpt_every=0", "logger.console=false", f"hydra.run.dir={run_dir}"],
                       check=True)
    print(f"calibration run: {time.perf_counter() - started:.0f} s", flush=True)
    results = []
    for workers in (1, 2):
        workload = read_calibration(SimulateConfig(calibrate=str(run_dir), workers=workers, max_staleness=1, steps=40))
        predicted = {0: seconds_per_step(simulate(workload, 0)), 1: seconds_per_step(simulate(workload, 1))}
        for staleness in (0, 1):
            cfg = compose_train([*COMMON, f"rollout.workers={workers}", f"rollout.max_staleness={staleness}",
                            f"bench.steps={args.bench_steps}", f"bench.repeats={args.repeats}", "logger.console=false"])
            measured = bench_command(cfg)["steps"]["times"]["configured"]
            results.append({"workers": workers, "max_staleness": staleness, "predicted_s": predicted[staleness],
                            "measured_best_s": min(measured), "measured_s": measured})
    print("\n| Ray workers | mode | predicted s/step | measured s/step (best of %d) | measured / predicted |" % args.repeats)
    print("|---|---|---|---|---|")
    for r in results:
        mode = "sync" if r["max_staleness"] == 0 else "async, max_staleness=1"
        print(f"| {r['workers']} | {mode} | {r['predicted_s']:.3f} | {r['measured_best_s']:.3f} | "
              f"{r['measured_best_s'] / r['predicted_s']:.2f} |")
    calibration = read_calibration(SimulateConfig(calibrate=str(run_dir)))
    summary = {"results": results, "episode_seconds": calibration.episode_seconds,
               "update_seconds": calibration.update_seconds, "episodes_per_step": calibration.episodes_per_step}
    (args.out / "simulator_check.json").write_text(json.dumps(summary, indent=1))
    print(f"\nwrote {args.out / 'simulator_check.json'}; total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
