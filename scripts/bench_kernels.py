"""The cost of pinned kernels: seconds per GRPO step with each BUGFIX_RL_KERNELS mode (kernels.py).

    .venv/bin/python scripts/bench_kernels.py [--steps 20] [--repeats 3] [--threads 2] [--modes portable compatible native]

The kernels are chosen before torch loads, so each measurement runs in a child process; the modes
alternate (portable, compatible, native, portable, ...) so a busy machine slows them alike. Every child starts
from the same weights (the cached portable RL base, built first if missing), trains --steps GRPO
steps of the capstone workload (64 episodes) from seed 0 and reports its median step; the script
prints each mode's best repeat and its ratio to the first mode's. The modes' trajectories differ after the first
rounding difference, so their episode lengths are printed too: compare like with like.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, statistics, sys
import bugfix_rl
import torch
from bugfix_rl.checkpoint import load_checkpoint, load_model_state
from bugfix_rl.config import TrainConfig
from bugfix_rl.gym.envs import make_env_factory
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.kernels import kernel_signature
from bugfix_rl.policy.tiny import architecture, new_tiny_agent
from bugfix_rl.policy.tokenizer import build_tokenizer
from bugfix_rl.run.trainer import Trainer

path, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
cfg = TrainConfig()
tokenizer = build_tokenizer(make_tasks("all"))
model = new_tiny_agent(tokenizer, architecture(cfg.policy))
load_model_state(model, load_checkpoint(path)[0], path)
make_env, _ = make_env_factory(cfg.env)
torch.manual_seed(0)
trainer = Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(0))
rows = [trainer.step(s) for s in range(steps)]
print(json.dumps({"kernels": kernel_signature(),
                  "step": statistics.median(r["time_sample"] + r["time_update"] for r in rows),
                  "sample": statistics.median(r["time_sample"] for r in rows),
                  "update": statistics.median(r["time_update"] for r in rows),
                  "length": statistics.mean(r["length"] for r in rows)}))
"""

BASE = r"""
import bugfix_rl
from bugfix_rl.checkpoint import model_tensors, save_checkpoint
from bugfix_rl.config import TrainConfig
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.tokenizer import build_tokenizer
from bugfix_rl.recipes.rl_base import make_rl_base
import sys
save_checkpoint(sys.argv[1], model_tensors(make_rl_base(build_tokenizer(make_tasks("all")), TrainConfig().policy)), {})
"""


def run(code: str, mode: str, *args: str) -> str:
    from bugfix_rl.kernels import env_for_mode  # kernels.py loads no torch

    out = subprocess.run([sys.executable, "-c", code, *args], env=env_for_mode(mode),
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", nargs="+", default=["portable", "compatible", "native"])
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        start = os.path.join(tmp, "start.safetensors")
        run(BASE, "portable", start)
        results: dict[str, list[dict]] = {mode: [] for mode in args.modes}
        for r in range(args.repeats):
            for mode in results:
                res = json.loads(run(CHILD, mode, start, str(args.steps), str(args.threads)))
                results[mode].append(res)
                print(f"repeat {r} {mode:10s} ({res['kernels']}): median step {res['step']:.3f} s = sampling"
                      f" {res['sample']:.3f} + update {res['update']:.3f} (mean episode {res['length']:.1f} tokens)")
    best = {mode: min(rs, key=lambda x: x["step"])["step"] for mode, rs in results.items()}
    first = args.modes[0]
    print(f"best of {args.repeats}, {args.steps} steps of 64 episodes, {args.threads} threads: "
          + ", ".join(f"{mode} {best[mode]:.3f} s ({best[mode] / best[first]:.2f}x {first})" for mode in args.modes))


if __name__ == "__main__":
    main()
