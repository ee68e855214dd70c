"""Teacher-forced probe: how likely a checkpoint finds the oracle's episode, token by token.

    .venv/bin/python scripts/probe_oracle.py <checkpoint> minmax/saturate range/step_total [--below 0.9]

For each task the env's scripted oracle (Read, the exact-line Edit, `Bash pytest`, done) plays one
episode; the checkpoint's policy then scores every token the oracle chose, with the trainer's
log-probs at temperature 1. Policy tokens whose probability is below --below are printed as
`word[p]`; observations are left out. This shows where a policy leaves the right path: a copy it
does not make (the `old_string`), a fix it does not choose (`max` for `min`), a call it does not end.

`--top K` adds, for each printed token, the K words the policy itself preferred there
(`in[0.00 | count 0.97, in 0.00]`): what it would have written instead.

`--source FILE` probes a task of your own instead: FILE holds a function in the style of
gym/tasks.py, graded with the tests of the first task named (only the episode is needed, not the
reward, so the tests need not fit).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch

from bugfix_rl.algo.update import token_logprobs
from bugfix_rl.checkpoint import CheckpointError
from bugfix_rl.evaluate.checkpoint_eval import load_policy
from bugfix_rl.gym.envs import make_env_factory, oracle_for
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.rollout.sampler import scripted_episode
from bugfix_rl.types import collate


def probe(model, tokenizer, make_env, oracle, task, shown_name: str = "nova",
          top: int = 0) -> tuple[list[tuple[str, float | None, list]], float]:
    """([(word, its probability if the policy chose it, else None, the policy's `top` likeliest words
    there as (word, p))], total log-prob of the policy tokens)."""
    trajectory = scripted_episode(oracle(), make_env(task, shown_name), tokenizer)
    batch = collate([trajectory], tokenizer.pad_id)
    with torch.no_grad():
        logp = token_logprobs(model, batch.ids, 1.0, mask=batch.mask).logp[0]  # [T-1]
        # the sampler's distribution at temperature 1: log_softmax of what the model returns (logits,
        # or a copy head's mixture log-probs)
        best = torch.log_softmax(model(batch.ids)[0, :-1], -1).exp().topk(top, -1) if top else None  # [T-1, top]
    word = lambda token: tokenizer.word(int(token), trajectory.oov_words)
    words = []
    for t, token in enumerate(trajectory.ids):
        if t == 0:
            continue
        chosen = trajectory.policy_mask[t]
        preferred = ([(word(i), float(p)) for p, i in zip(best.values[t - 1], best.indices[t - 1])]
                     if best is not None and chosen else [])
        words.append((word(token), float(logp[t - 1].exp()) if chosen else None, preferred))
    return words, float((logp * batch.mask[0]).sum())


def _preferred(best: list) -> str:
    return " | " + ", ".join(f"{w} {p:.2f}" for w, p in best) if best else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("tasks", nargs="+", help="task names (bugfix-rl's gym: minmax/saturate, ...)")
    parser.add_argument("--below", type=float, default=0.9, help="print p for policy tokens below this")
    parser.add_argument("--source", type=Path, help="probe this function's source with the first task's tests")
    parser.add_argument("--top", type=int, default=0, help="also print the policy's K likeliest words there")
    args = parser.parse_args()
    try:
        policy = load_policy(args.checkpoint)
        source = args.source.read_text() if args.source else None
    except (CheckpointError, OSError) as err:  # one line, exit 1: a wrong path is not a crash
        sys.exit(f"probe_oracle: {err}")
    by_name = {t.name: t for t in make_tasks("all")}
    unknown = [name for name in args.tasks if name not in by_name]
    if unknown:
        sys.exit(f"unknown task(s): {', '.join(unknown)}")
    tasks = [by_name[name] for name in args.tasks]
    if source is not None:
        tasks = [dataclasses.replace(tasks[0], source=source, name=f"{tasks[0].name}~probe")]
    make_env, close_env = make_env_factory(policy.cfg.env)
    try:
        for task in tasks:
            words, total = probe(policy.model, policy.tokenizer, make_env, oracle_for(policy.cfg.env), task,
                                 top=args.top)
            shown = [w if p is None or p >= args.below else f"{w}[{p:.2f}{_preferred(best)}]" for w, p, best in words
                     if p is not None or w == "<eoo>"]
            print(f"## {task.name}: log-prob of the oracle's policy tokens {total:.2f}")
            print(" ".join(shown))
    finally:
        close_env()


if __name__ == "__main__":
    main()
