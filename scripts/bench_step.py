"""Seconds per GRPO step of the capstone workload (64 episodes, 2 threads), split into sampling and update.

    .venv/bin/python scripts/bench_step.py [--steps 25] [--repeats 3] [--threads 2]

Each repeat trains the RL base for --steps steps from the same seed; the script prints the median
over steps of each repeat and the best repeat (the machine may be shared: read the best and the
ratio of parts, not one noisy number). A second block times per-episode sampling (the same
episodes generated one at a time) against the batched KV-cache sampler, in the same run.

    git worktree add /tmp/before 9e4fcfe && python scripts/bench_step.py --against /tmp/before

--against CHECKOUT times another checkout's step beside this one's: rounds alternate between the two
(each a fresh process running that checkout's own bench_step.py with --repeats 1 on its own code,
its RL base cached by its own recipe), and the best round of each side is compared, so a change in the
machine's load hits both alike. This checkout runs with its default portable kernels and again with
BUGFIX_RL_KERNELS=native; the other checkout runs with its own default (native before kernels.py,
portable since). No child inherits this process's pinned variables.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch

from bugfix_rl.config import TrainConfig
from bugfix_rl.gym.envs import make_env_factory
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.tokenizer import build_tokenizer
from bugfix_rl.recipes.rl_base import make_rl_base
from bugfix_rl.rollout.collect import sample_groups
from bugfix_rl.run.trainer import Trainer


def time_steps(base, tokenizer, cfg, steps: int) -> dict:
    model = copy.deepcopy(base)
    make_env, _ = make_env_factory(cfg.env)
    torch.manual_seed(cfg.seed)
    trainer = Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(cfg.seed))
    rows = [trainer.step(s) for s in range(steps)]
    sample = statistics.median(r["time_sample"] for r in rows)
    update = statistics.median(r["time_update"] for r in rows)
    total = statistics.median(r["time_sample"] + r["time_update"] for r in rows)
    return {"sample": sample, "update": update, "total": total, "tokens": statistics.mean(r["length"] for r in rows)}


def time_sampling(base, tokenizer, cfg, batched: bool, repeats: int) -> float:
    make_env, _ = make_env_factory(cfg.env)
    tasks = make_tasks("train")[:8]
    best = float("inf")
    for _ in range(repeats):
        generator = torch.Generator().manual_seed(0)
        start = time.perf_counter()
        if batched:
            sample_groups(base, tokenizer, tasks, 8, make_env, 1.0, generator)
        else:
            for task in tasks:
                for _ in range(8):
                    sample_groups(base, tokenizer, [task], 1, make_env, 1.0, generator)
        best = min(best, time.perf_counter() - start)
    return best


_REPEAT_LINE = re.compile(r"repeat 0: median over \d+ steps: step ([\d.]+) s = sampling ([\d.]+) \+ update ([\d.]+)"
                          r" \(mean episode ([\d.]+) tokens\)")


def one_round(checkout: Path, steps: int, threads: int, kernels: str | None) -> dict:
    """One repeat of `checkout`'s own bench_step.py in a fresh process on that checkout's code."""
    from bugfix_rl.kernels import env_for_mode  # this process's pins must not reach the child: it pins its own

    # a clean environment (no pins, not this process's answer to MKL's check): the child sets its own
    env = {**env_for_mode(kernels or "native"), "PYTHONPATH": str(checkout / "src")}
    if not kernels:
        del env["BUGFIX_RL_KERNELS"]  # the checkout's own default
    where = subprocess.run([sys.executable, "-c", "import bugfix_rl; print(bugfix_rl.__file__)"], env=env,
                           cwd=checkout, capture_output=True, text=True, check=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(checkout.resolve()):
        sys.exit(f"{checkout} would run bugfix_rl from {where}")
    result = subprocess.run([sys.executable, "scripts/bench_step.py", "--steps", str(steps), "--repeats", "1",
                             "--threads", str(threads)], env=env, cwd=checkout, capture_output=True, text=True)
    match = _REPEAT_LINE.search(result.stdout)
    if result.returncode != 0 or match is None:
        sys.exit(f"{checkout}: bench_step.py failed:\n{result.stdout[-1500:]}{result.stderr[-1500:]}")
    total, sample, update, tokens = map(float, match.groups())
    return {"total": total, "sample": sample, "update": update, "tokens": tokens}


def side_by_side(baseline: Path, steps: int, threads: int, rounds: int) -> None:
    here = Path(__file__).resolve().parents[1]
    sides = {"this checkout (portable kernels)": (here, None), "this checkout (native kernels)": (here, "native"),
             f"{baseline} (its default kernels)": (baseline, None)}
    best: dict[str, dict] = {}
    for r in range(rounds):
        for label, (checkout, kernels) in sides.items():
            res = one_round(checkout, steps, threads, kernels)
            print(f"round {r}: {label}: step {res['total']:.3f} s = sampling {res['sample']:.3f} + update "
                  f"{res['update']:.3f} (mean episode {res['tokens']:.1f} tokens)", flush=True)
            if label not in best or res["total"] < best[label]["total"]:
                best[label] = res
    old = best[f"{baseline} (its default kernels)"]
    print(f"\nbest of {rounds} rounds, median over {steps} steps each, {threads} threads, 64 episodes per step:")
    print("| side | s/step | sampling | update | step vs baseline | mean episode tokens |")
    print("|---|---|---|---|---|---|")
    for label, res in best.items():
        print(f"| {label} | {res['total']:.3f} | {res['sample']:.3f} | {res['update']:.3f} |"
              f" {res['total'] / old['total']:.2f}x | {res['tokens']:.1f} |")
    print("(each side trains its own RL base, so its episodes differ in length: compare the tokens too)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--against", metavar="CHECKOUT", help="time another checkout's step beside this one's")
    parser.add_argument("--rounds", type=int, default=3, help="with --against: rounds per side")
    args = parser.parse_args()
    if args.against:
        side_by_side(Path(args.against), args.steps, args.threads, args.rounds)
        return
    torch.set_num_threads(args.threads)
    cfg = TrainConfig()
    tokenizer = build_tokenizer(make_tasks("all"))
    base = make_rl_base(tokenizer, cfg.policy)
    results = []
    for r in range(args.repeats):
        res = time_steps(base, tokenizer, cfg, args.steps)
        results.append(res)
        print(f"repeat {r}: median over {args.steps} steps: step {res['total']:.3f} s = sampling {res['sample']:.3f}"
              f" + update {res['update']:.3f} (mean episode {res['tokens']:.1f} tokens)")
    best = min(results, key=lambda x: x["total"])
    print(f"best repeat: {best['total']:.3f} s per GRPO step (64 episodes, {args.threads} threads):"
          f" sampling {best['sample']:.3f} s, update {best['update']:.3f} s")
    batched = time_sampling(base, tokenizer, cfg, True, args.repeats)
    single = time_sampling(base, tokenizer, cfg, False, args.repeats)
    print(f"sampling 64 episodes: batched KV cache {batched:.3f} s, one episode at a time {single:.3f} s"
          f" (ratio {single / batched:.1f}x)")


if __name__ == "__main__":
    main()
