"""What the old_string guide costs the sampler: 80 tools episodes from +exp=tools_generated's RL base
(the book's 20 training tasks, 4 episodes each, one seed), sampled with env.guide_old_string off and on,
alternating, best of --rounds. The guide changes the episodes (fewer failed Edits), so compare the time
per policy token too.

    .venv/bin/python scripts/bench_guide.py [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import bugfix_rl  # noqa: E402,F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch  # noqa: E402


def sample_once(guide: bool) -> tuple[float, int, int]:
    """(seconds, guided tokens, policy tokens) of one batch of 80 episodes."""
    from bugfix_rl.cli import compose_train
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.gym.tasks import make_tasks
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.recipes.starting_policy import build_starting_policy
    from bugfix_rl.rollout.sampler import sample_episodes

    cfg = compose_train(["exp=tools_generated", f"env.guide_old_string={str(guide).lower()}"])
    tokenizer = build_tokenizer_for(cfg)
    model = build_starting_policy(cfg.policy, tokenizer, env_cfg=cfg.env).eval()
    make_env, close = make_env_factory(cfg.env)
    try:
        envs = [make_env(task, None) for task in make_tasks("train") for _ in range(4)]
        start = time.perf_counter()
        episodes = sample_episodes(model, tokenizer, envs, list(range(len(envs))), cfg.algo.temperature,
                                   torch.Generator().manual_seed(0))
        seconds = time.perf_counter() - start
    finally:
        close()
    return seconds, sum(len(t.guided) for t in episodes), sum(t.policy_tokens for t in episodes)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.threads < 1:
        parser.error("--rounds and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    best: dict[bool, tuple[float, int, int]] = {}
    for _ in range(args.rounds):
        for guide in (False, True):
            result = sample_once(guide)
            if guide not in best or result[0] < best[guide][0]:
                best[guide] = result
    for guide, (seconds, guided, tokens) in best.items():
        print(f"guide {'on ' if guide else 'off'}: {seconds:.3f} s for 80 episodes, {tokens} policy tokens"
              f" ({1000 * seconds / tokens:.2f} ms each), {guided} guided; best of {args.rounds}")
    per_token = {guide: seconds / tokens for guide, (seconds, _, tokens) in best.items()}
    print(f"on / off: {best[True][0] / best[False][0]:.2f}x per batch,"
          f" {per_token[True] / per_token[False]:.2f}x per policy token")


if __name__ == "__main__":
    main()
