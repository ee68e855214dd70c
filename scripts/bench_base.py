"""Seconds per behaviour-cloning step of the edit-menu RL base: padded rows against packed rows.

    .venv/bin/python scripts/bench_base.py [--steps 40] [--repeats 3] [--threads 1 2] [--pack-rows 160]

Both sides train a fresh TinyAgent on the same random minibatches of the recipe's demonstrations
(policy.base: 2048 noisy scripted episodes, 64 per minibatch), one Adam step each, alternating side by
side within each repeat so a change in the machine's load hits both alike. Reported: the best repeat's
mean seconds per step of each side, their ratio, the padded tokens per step and what the full recipe
(policy.base.steps) would take at that rate.
"""

from __future__ import annotations

import argparse
import time

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch
from omegaconf import OmegaConf

from bugfix_rl.algo.sft import pack, packed_sft_loss, sft_loss
from bugfix_rl.config import TrainConfig
from bugfix_rl.policy.build import build_tokenizer_for
from bugfix_rl.policy.tiny import architecture, new_tiny_agent
from bugfix_rl.recipes.rl_base import noisy_demonstrations
from bugfix_rl.types import collate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--pack-rows", type=int, default=160)
    args = parser.parse_args()
    cfg = OmegaConf.to_object(OmegaConf.structured(TrainConfig))
    recipe, tokenizer = cfg.policy.base, build_tokenizer_for(cfg)
    demos = noisy_demonstrations(recipe, tokenizer)
    generator = torch.Generator().manual_seed(0)
    picks = [[demos[i] for i in torch.randperm(len(demos), generator=generator)[:recipe.batch_size].tolist()]
             for _ in range(args.steps + 3)]
    padded_tokens = sum(collate(p).ids.numel() for p in picks) / len(picks)
    packed_tokens = sum(pack(p, args.pack_rows).ids.numel() for p in picks) / len(picks)
    real_tokens = sum(len(d.ids) for p in picks for d in p) / len(picks)
    print(f"tokens per minibatch of {recipe.batch_size}: real {real_tokens:.0f}, padded rows {padded_tokens:.0f}, "
          f"packed rows of {args.pack_rows} {packed_tokens:.0f}")
    losses = {"padded": lambda model, p: sft_loss(model, collate(p)),
              "packed": lambda model, p: packed_sft_loss(model, pack(p, args.pack_rows))}
    for threads in args.threads:
        torch.set_num_threads(threads)
        best = {name: float("inf") for name in losses}
        for _ in range(args.repeats):
            for name, loss_of in losses.items():
                torch.manual_seed(recipe.seed)
                model = new_tiny_agent(tokenizer, architecture(cfg.policy))
                optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr)
                for i, p in enumerate(picks):
                    if i == 3:  # 3 warm-up steps
                        start = time.perf_counter()
                    loss = loss_of(model, p)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    loss.item()
                best[name] = min(best[name], (time.perf_counter() - start) / args.steps)
        print(f"{threads} thread(s), best of {args.repeats} x {args.steps} steps: padded {best['padded']:.4f} s/step, "
              f"packed {best['packed']:.4f} s/step, ratio {best['padded'] / best['packed']:.2f}x; "
              f"{recipe.steps} steps: padded {best['padded'] * recipe.steps:.1f} s, "
              f"packed {best['packed'] * recipe.steps:.1f} s")


if __name__ == "__main__":
    main()
