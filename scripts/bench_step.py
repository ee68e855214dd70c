"""Seconds per GRPO step of the capstone workload (64 episodes, 2 threads), split into sampling and update.

    .venv/bin/python scripts/bench_step.py [--steps 25] [--repeats 3] [--threads 2]

Each repeat trains the RL base for --steps steps from the same seed; the script prints the median
over steps of each repeat and the best repeat (the machine may be shared: read the best and the
ratio of parts, not one noisy number). A second block times per-episode sampling (the same
episodes generated one at a time) against the batched KV-cache sampler, in the same run.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch

from bugfix_rl.config import TrainConfig
from bugfix_rl.envs import make_env_factory
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.rl_base import make_rl_base
from bugfix_rl.policy.tokenizer import build_tokenizer
from bugfix_rl.rollout.collect import sample_groups
from bugfix_rl.train import Trainer


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
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
