"""Teacher-forced probe: how likely a checkpoint finds the oracle's episode, token by token.

    .venv/bin/python scripts/probe_oracle.py <checkpoint> minmax/saturate range/step_total [--below 0.9]

For each task the env's scripted oracle (Read, the exact-line Edit, `Bash pytest`, done) plays one
episode; the checkpoint's policy then scores every token the oracle chose, with the trainer's
log-probs at temperature 1. Policy tokens whose probability is below --below are printed as
`word[p]`; observations are left out. This shows where a policy leaves the right path: a copy it
does not make (the `old_string`), a fix it does not choose (`max` for `min`), a call it does not end.

Task names may be of any split, the new-shape ones (`shapes`, `shapes_val`) included.

`--top K` adds, for each printed token, the K words the policy itself preferred there
(`in[0.00 | count 0.97, in 0.00]`): what it would have written instead.

`--source FILE` probes a task of your own instead: FILE holds a function in the style of
gym/tasks.py, graded with the tests of the first task named (only the episode is needed, not the
reward, so the tests need not fit).

    .venv/bin/python scripts/probe_oracle.py <checkpoint> --by-kind shapes_val pool
    .venv/bin/python scripts/probe_oracle.py --exp tools_generated --set policy.copy_lookup=true --by-kind shapes_val

`--by-kind SPLIT ...` plays the oracle on every task of each split (`pool`: 50 tasks drawn with seed 0
from the run's training pool, generated tasks included) and prints the mean log-prob per task of the
oracle's policy tokens by kind (token_kinds): in the Edit's old_string the line's first word, the rest
where the policy would rather have ended old_string there, the rest otherwise, and its end; in
new_string the tokens difflib aligns with old_string's (copies) and the others (changes); and the other
tokens.
`--exp NAME` probes the starting policy (the RL base) of `+exp=NAME` with `--set` overrides instead of a
checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import random
import sys
from pathlib import Path

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch

from bugfix_rl.algo.update import token_logprobs
from bugfix_rl.checkpoint import CheckpointError
from bugfix_rl.errors import UserError
from bugfix_rl.evaluate.checkpoint_eval import load_policy
from bugfix_rl.gym.envs import env_sandbox, make_env_factory, oracle_for
from bugfix_rl.gym.tasks import SPLITS, make_tasks
from bugfix_rl.gym.tools.code_words import INDENT
from bugfix_rl.policy.guided_edits import hold_to_allowed, replay_guide
from bugfix_rl.rollout.sampler import scripted_episode
from bugfix_rl.types import collate


def probe(model, tokenizer, make_env, oracle, task, shown_name: str = "nova",
          top: int = 0) -> tuple[list[tuple[str, float | None, list]], float]:
    """([(word, its probability if the policy chose it, else None, the policy's `top` likeliest words
    there as (word, p))], total log-prob of the policy tokens)."""
    env = make_env(task, shown_name)
    trajectory = guided_as_sampled(scripted_episode(oracle(), env, tokenizer), env, tokenizer)
    batch = collate([trajectory], tokenizer.pad_id)
    with torch.no_grad():
        logp = token_logprobs(model, batch.ids, 1.0, mask=batch.mask, allowed=batch.allowed).logp[0]  # [T-1]
        # the sampler's distribution at temperature 1: log_softmax of what the model returns (logits,
        # or a copy head's mixture log-probs), held to the guide's ids where it guides
        best = torch.log_softmax(sampler_logits(model, batch), -1).exp().topk(top, -1) if top else None  # [T-1, top]
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


KINDS = ("line choice", "rest: would stop", "rest: copy", "old end", "new copies", "new changes", "other")


def token_kinds(words: list[str], chosen: list[bool]) -> list[str | None]:
    """The kind (KINDS, without the two `rest` ones: "rest") of each policy word of an oracle episode; None
    for the env's words. In old_string: the first words up to and with the first that is not an indent
    ("line choice"), the others ("rest"), and `new` ("old end"); in new_string, up to the call's end: a
    word of a block that difflib matches with old_string ("new copies", so copies after an insertion
    count as copies) or not ("new changes"); everything else "other"."""
    kinds, state, old, new_at = [], "other", [], []
    for t, (word, by_policy) in enumerate(zip(words, chosen)):
        if state == "new" and (not by_policy or word in (";", "<eoa>")):
            _label_new_string(kinds, words, old, new_at)
            state = "other"
        if not by_policy:
            kinds.append(None)
            state = "other"
        elif state == "old" and word == "new":
            kinds.append("old end")
            state, new_at = "new", []
        elif state in ("old", "old line"):
            kinds.append("line choice" if state == "old line" else "rest")
            old.append(word)
            state = "old line" if state == "old line" and word == INDENT else "old"
        elif state == "new":
            kinds.append("new")  # labelled once new_string ends
            new_at.append(t)
        else:
            kinds.append("other")
            state = "old line" if word == "old" else "other"
            old = [] if word == "old" else old
    if state == "new":
        _label_new_string(kinds, words, old, new_at)
    return kinds


def _label_new_string(kinds: list, words: list[str], old: list[str], new_at: list[int]) -> None:
    """Label new_string's positions `new_at` in kinds: copies where difflib aligns them with old_string."""
    new = [words[t] for t in new_at]
    copied = set()
    for block in difflib.SequenceMatcher(None, old, new, autojunk=False).get_matching_blocks():
        copied.update(range(block.b, block.b + block.size))
    for k, t in enumerate(new_at):
        kinds[t] = "new copies" if k in copied else "new changes"


def guided_as_sampled(trajectory, env, tokenizer):
    """The oracle's trajectory with the guide's allowed ids where the env it played in guides old_string
    (env.guide_old_string): its tokens are then scored as the guided sampler would score them."""
    if not getattr(env, "guide_old_string", False):
        return trajectory
    return dataclasses.replace(trajectory, guided=replay_guide(trajectory.ids, trajectory.policy_mask, tokenizer,
                                                               trajectory.oov_words))


def sampler_logits(model, batch):
    """[T-1, V] the logits the sampler draws from after each position of one episode (guided where it guides)."""
    logits = model(batch.ids)[0, :-1]
    return logits if batch.allowed is None else hold_to_allowed(logits, batch.allowed[0])


def kind_totals(model, tokenizer, trajectory) -> dict[str, float]:
    """{kind: summed log-prob of the oracle's policy tokens of that kind} for one oracle trajectory; a
    `rest` token counts as "rest: would stop" where the policy gives `new` more than the token."""
    batch = collate([trajectory], tokenizer.pad_id)
    with torch.no_grad():
        logp = torch.log_softmax(sampler_logits(model, batch), -1)  # [T-1, V]
    ids = trajectory.ids
    words = [tokenizer.word(int(token), trajectory.oov_words) for token in ids]
    new_id = ids[words.index("new")] if "new" in words else None
    totals = dict.fromkeys(KINDS, 0.0)
    for t, kind in enumerate(token_kinds(words, trajectory.policy_mask)):
        if kind is None or t == 0:
            continue
        value = float(logp[t - 1, ids[t]])
        if kind == "rest":
            kind = "rest: would stop" if new_id is not None and float(logp[t - 1, new_id]) > value else "rest: copy"
        totals[kind] += value
    return totals


def _preferred(best: list) -> str:
    return " | " + ", ".join(f"{w} {p:.2f}" for w, p in best) if best else ""


def starting_policy(exp: str, overrides: list[str]):
    """(model, tokenizer, cfg): the starting policy of `+exp=exp` with `overrides` (its RL base)."""
    from bugfix_rl.cli import compose_train
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.recipes.starting_policy import build_starting_policy

    cfg = compose_train([f"exp={exp}", *overrides])
    tokenizer = build_tokenizer_for(cfg)
    return build_starting_policy(cfg.policy, tokenizer, env_cfg=cfg.env).eval(), tokenizer, cfg


def split_tasks(split: str, env_cfg, sandbox) -> list:
    """The tasks of a split; `pool`: 50 drawn with seed 0 from the run's training pool."""
    if split != "pool":
        return make_tasks(split)
    from bugfix_rl.gym.generator import training_pool

    pool = training_pool(env_cfg, sandbox)
    return random.Random(0).sample(pool, min(50, len(pool)))


def print_by_kind(model, tokenizer, cfg, splits: list[str]) -> None:
    """Mean log-prob per task of the oracle's policy tokens by kind, one row per split."""
    make_env, close_env = make_env_factory(cfg.env)
    try:
        print("split".ljust(12) + "".join(kind.rjust(18) for kind in KINDS) + "   tasks")
        for split in splits:
            tasks = split_tasks(split, cfg.env, env_sandbox(make_env))
            sums = dict.fromkeys(KINDS, 0.0)
            for task in tasks:
                env = make_env(task, "nova")
                trajectory = guided_as_sampled(scripted_episode(oracle_for(cfg.env)(), env, tokenizer), env, tokenizer)
                for kind, value in kind_totals(model, tokenizer, trajectory).items():
                    sums[kind] += value
            print(split.ljust(12) + "".join(f"{sums[k] / len(tasks):18.3f}" for k in KINDS) + f"   {len(tasks)}")
    finally:
        close_env()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?", help="a training checkpoint (or --exp)")
    parser.add_argument("tasks", nargs="*", help="task names (bugfix-rl's gym: minmax/saturate, ...)")
    parser.add_argument("--below", type=float, default=0.9, help="print p for policy tokens below this")
    parser.add_argument("--source", type=Path, help="probe this function's source with the first task's tests")
    parser.add_argument("--top", type=int, default=0, help="also print the policy's K likeliest words there")
    parser.add_argument("--by-kind", nargs="+", metavar="SPLIT", help="log-prob by token kind over these splits")
    parser.add_argument("--exp", help="probe the RL base of +exp=EXP instead of a checkpoint")
    parser.add_argument("--set", nargs="*", action="extend", default=[], metavar="KEY=VALUE",
                        help="overrides for --exp (several, after one --set or after several)")
    args = parser.parse_args()
    if (args.checkpoint is None) == (args.exp is None):
        parser.error("give a checkpoint or --exp (one of the two)")
    if not args.by_kind and not args.tasks:
        parser.error("give task names or --by-kind SPLIT ...")
    unknown = [s for s in args.by_kind or [] if s != "pool" and s not in SPLITS]
    if unknown:
        parser.error(f"unknown split {unknown[0]!r}; valid: pool, {', '.join(SPLITS)}")
    try:
        if args.exp:
            model, tokenizer, cfg = starting_policy(args.exp, args.set)
        else:
            policy = load_policy(args.checkpoint)
            model, tokenizer, cfg = policy.model, policy.tokenizer, policy.cfg
        source = args.source.read_text() if args.source else None
    except (CheckpointError, OSError, UserError) as err:  # one line, exit 1: a wrong path is not a crash
        sys.exit(f"probe_oracle: {err}")
    if args.by_kind:
        print_by_kind(model, tokenizer, cfg, args.by_kind)
        return
    by_name = {t.name: t for split in ("all", "shapes", "shapes_val") for t in make_tasks(split)}  # the new shapes too
    unknown = [name for name in args.tasks if name not in by_name]
    if unknown:
        sys.exit(f"unknown task(s): {', '.join(unknown)}")
    tasks = [by_name[name] for name in args.tasks]
    if source is not None:
        tasks = [dataclasses.replace(tasks[0], source=source, name=f"{tasks[0].name}~probe")]
    make_env, close_env = make_env_factory(cfg.env)
    try:
        for task in tasks:
            words, total = probe(model, tokenizer, make_env, oracle_for(cfg.env), task, top=args.top)
            shown = [w if p is None or p >= args.below else f"{w}[{p:.2f}{_preferred(best)}]" for w, p, best in words
                     if p is not None or w == "<eoo>"]
            print(f"## {task.name}: log-prob of the oracle's policy tokens {total:.2f}")
            print(" ".join(shown))
    finally:
        close_env()


if __name__ == "__main__":
    main()
