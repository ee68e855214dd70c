"""How far RL gets on the `shapes` templates when it trains on them: a ceiling for issue 35's numbers.

    .venv/bin/python scripts/shapes_ceiling.py [--exp tools_generated] [--seed 0] [--steps 60] [--out FILE]
                                               [--base training|reserved] [--set KEY=VALUE ...]
                                               [--read-at STEP ...] [--average DECAY] [--end-only] [--behaviour]

Two arms from the same RL base, seed and recipe, one after the other in this process:

- `training`: the preset's pool (the book's 20 training tasks and env.generated_tasks from the
  generator's training templates): what `bugfix-rl train +exp=<exp>` trains on;
- `reserved`: the book's 20 and as many generated tasks from the RESERVED templates (the ones the
  `shapes` split is built from), drawn with another seed; a draw with the source of a `shapes` task
  is dropped, so the two share templates, not tasks.

Each arm's policy is evaluated on the `shapes` split (50 tasks x eval.shapes_n) at step 0, half way and
at the end (and at each --read-at step), and on the held-out split at the end; then the paired interval
over the shapes tasks, reserved - training, at the end. No checkpoint selection: both arms are read at the
same steps.
`--split shapes_val` reads the `shapes_val` split in its place (the JSON's "shapes" readings are then
that split's, and its "split" says so): a recipe for new shapes is chosen there, and the `shapes` split
is left unread until the choice is made. It takes `--arms training` only (the reserved arm's pool is the
`shapes` templates').

The `reserved` arm trains on the shapes split's templates, so its shapes number is not a held-out
one: it says whether this agent can learn those shapes at all when RL shows them (the ceiling), not
whether it generalises. If the ceiling is low too, more training shapes would not close the gap; if it
is high, the gap is the generalisation itself.

`--base reserved` asks the same of behaviour cloning: the RL base is built afresh (not cached) from the
preset's recipe with its demonstrations drawn from the reserved arm's pool instead of the training pool,
so both arms start from a policy that has seen scripted episodes on the shapes split's templates. Its
step-0 shapes number is the most the base recipe's imitation gets on those shapes.

`--reserved-templates ID ...` draws the reserved pool from some reserved templates only, and
`--with-training` adds the training pool's generated tasks to it: with both, the reserved arm trains on
the training shapes widened by some reserved ones, and the shapes tasks of the other reserved templates
(printed per template at the end) say whether the wider pool carries over to shapes it did not hold.

`--widen-edits P` builds the RL base by the preset's recipe with its demonstrations' Edits widened: with
probability P an Edit's old_string and new_string take one more unchanged neighbouring line (above or
below, drawn at random), so old_string no longer has one length per training template. The same change,
the same fixed file; only the span copied differs. It asks whether the base's habit of ending
old_string at a training template's length is what keeps it from new shapes. `--widen-lines K` (default
1) widens a chosen Edit by 1 to K lines (drawn evenly), one line at a time. A widened base is cached
beside the RL bases, keyed by the preset base's key, P and K, so the seeds of one arm build it once.

`--behaviour` keeps the end's episodes and writes, beside each of its readings, their behaviour means (as
eval.json has them) and, per kind of refused call, how many episodes had one and how many of those
passed: whether the agent recovers from a refusal. The episodes are the same; they are only kept.

`--average DECAY` keeps an exponential moving average of the policy's weights beside the training
(torch.optim.swa_utils.AveragedModel: after each step, average = DECAY x average + (1 - DECAY) x
weights, starting from the weights after the first step) and reads it too at the end, on the split and
on the held-out tasks, as arm `<label>_average` in the JSON. Training itself is untouched (the average
never samples), so each seed's two readings at the end share their whole run. `--end-only` skips the
readings at step 0 and half way.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import time
from pathlib import Path

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from bugfix_rl.checkpoint import model_tensors, save_checkpoint
from bugfix_rl.cli import compose_train
from bugfix_rl.errors import UserError
from bugfix_rl.evaluate.evaluate import behaviour_stats
from bugfix_rl.evaluate.stats import paired_summary
from bugfix_rl.gym import generator
from bugfix_rl.gym.agents import scripted_tools
from bugfix_rl.gym.agents.scripted_tools import line_edit
from bugfix_rl.gym.envs import env_sandbox, make_env_factory
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.gym.templates import RESERVED_TEMPLATES
from bugfix_rl.gym.tools.code_words import file_lines
from bugfix_rl.kernels import set_torch_threads
from bugfix_rl.present.report_run import rate_text
from bugfix_rl.policy.build import build_tokenizer_for
from bugfix_rl.policy.tiny import architecture, new_tiny_agent
from bugfix_rl.recipes import rl_base
from bugfix_rl.recipes.starting_policy import build_starting_policy
from bugfix_rl.run.evaluations import evaluate_split
from bugfix_rl.run.trainer import Trainer

RESERVED_SEED_OFFSET = 7919  # the reserved arm's generator seed: env.generated_seed + this (not SHAPES_SEED)


def composed(exp: str, seed: int, threads: int, overrides: list[str]):
    return compose_train([f"exp={exp}", f"seed={seed}", f"threads={threads}", *overrides])


def reserved_pool(n: int, seed: int, sandbox, templates: list[str] | None = None) -> list:
    """The book's training tasks and n checked tasks from the reserved templates (only those named in
    `templates` when given), families in turn, none with the source of a `shapes` task."""
    shapes = {task.source for task in make_tasks("shapes")}
    chosen = [t for t in RESERVED_TEMPLATES if templates is None or t.id in templates]
    by_family = [group for family in generator.FAMILIES if (group := tuple(t for t in chosen if t.family == family))]
    plan = [by_family[i % len(by_family)] for i in range(n + n // 4)]  # a margin for dropped draws
    drawn = generator._generate(plan, random.Random(seed), "train", sandbox)  # noqa: SLF001  the generator's checks
    fresh = [task for task in drawn if task.source not in shapes][:n]
    return make_tasks("train") + fresh


def reserved_base(cfg, tokenizer, pool: list):
    """The RL base of cfg's recipe with its demonstrations on `pool` (not cached). The recipe draws its
    demonstration tasks from generator.training_pool; for this one build that name answers `pool`."""
    drawn_from = rl_base.training_pool
    rl_base.training_pool = lambda env_cfg=None, sandbox=None: pool
    try:
        return rl_base.make_rl_base(tokenizer, cfg.policy, cache=False, env_cfg=cfg.env)
    finally:
        rl_base.training_pool = drawn_from


def widened_line_edit(before: str, after: str, share: float, rng: random.Random,
                      most_lines: int = 1) -> tuple[str, str]:
    """line_edit's (old_string, new_string), with probability `share` grown by 1 to
    `most_lines` unchanged neighbouring lines (how many drawn evenly, only when most_lines > 1), one at a
    time, each above or below (drawn) where there is one. Lines outside line_edit's span are the same in
    `before` and `after`, so the grown pair is the same change; it still occurs once in `before` (it
    holds a string that does)."""
    old, new = line_edit(before, after)
    if rng.random() >= share:
        return old, new
    lines, extra = file_lines(before), rng.randint(1, most_lines) if most_lines > 1 else 1
    for _ in range(extra):
        old, new = _one_line_wider(lines, old, new, rng)
    return old, new


def _one_line_wider(lines: list[str], old: str, new: str, rng: random.Random) -> tuple[str, str]:
    """(old, new) with the unchanged line above or below old's span in `lines` (drawn), if there is one."""
    k = len(old.split("\n"))
    start = next((i for i in range(len(lines) - k + 1) if "\n".join(lines[i:i + k]) == old), None)
    if start is None:
        return old, new
    sides = [side for side, there in (("above", start > 0), ("below", start + k < len(lines))) if there]
    if not sides:
        return old, new
    if rng.choice(sides) == "above":
        return f"{lines[start - 1]}\n{old}", f"{lines[start - 1]}\n{new}"
    return f"{old}\n{lines[start + k]}", f"{new}\n{lines[start + k]}"


def widened_base(cfg, tokenizer, share: float, most_lines: int = 1):
    """The RL base of cfg's recipe whose scripted demonstrations write widened Edits (widened_line_edit;
    drawn by their own generator, seeded by the recipe's seed), cached beside the preset's base under
    its key, share and most_lines. The swap covers every scripted Edit made during the build, the
    generator's oracle checks of the training pool included (the same fix either way, so the same
    tasks; they only take draws from that generator)."""
    preset = rl_base.base_path(tokenizer, cfg.policy, cfg.env)
    path = preset.with_name(f"widened-{share}-{most_lines}-{preset.name}")
    model = new_tiny_agent(tokenizer, architecture(cfg.policy))
    if rl_base._load_cached(path, model):  # noqa: SLF001  the RL bases' own loader
        print(f"widened base loaded from {path}", flush=True)
        return model
    rng = random.Random(cfg.policy.tools_base.seed)
    # scripted_tools.edit_words spans its Edit by the module's line_edit: for this build, the widened one
    scripted_tools.line_edit = lambda before, after: widened_line_edit(before, after, share, rng, most_lines)
    try:
        model = rl_base.make_rl_base(tokenizer, cfg.policy, cache=False, env_cfg=cfg.env)
    finally:
        scripted_tools.line_edit = line_edit
    path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(path, model_tensors(model), {"kind": "widened_rl_base", "share": share, "most_lines": most_lines})
    return model


def with_behaviour(result: dict, episodes: list) -> dict:
    """A reading with what its episodes did: per-episode means of their info metrics ("behaviour", as
    eval.json has them) and, per kind of refused call, [episodes with one, of those the ones that
    passed] ("after_refusal", passed as pass@1 counts it: info.success): whether the agent recovers."""
    after: dict[str, list[int]] = {}
    for episode in episodes:
        for kind in (kind for kind, count in episode.info.failed.items() if count):  # the env's refusals by kind
            counts = after.setdefault(kind, [0, 0])
            counts[0] += 1
            counts[1] += int(episode.info.success)
    return {**result, "behaviour": behaviour_stats(episodes), "after_refusal": dict(sorted(after.items()))}


def run_arm(cfg, base, tokenizer, make_env, tasks, label: str, split: str = "shapes",
            read_at: tuple[int, ...] = (), average: float | None = None, end_only: bool = False,
            behaviour: bool = False) -> dict:
    """The arm's readings: {"shapes": {step: result}, "heldout": result}, and with `average` (a decay) the
    same two for the moving average of the weights at the end under "average". With `behaviour`, the
    end's readings of the weights also hold what their episodes did (`with_behaviour`); the episodes are
    the same, only kept."""
    model = copy.deepcopy(base)
    torch.manual_seed(cfg.seed)
    trainer = Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(cfg.seed), reference=base,
                      tasks=tasks)
    shapes_seed, temperature = cfg.eval.shapes_seed_offset + cfg.seed, cfg.algo.temperature

    def read(policy, split_name: str, n: int, seed: int, keep: bool) -> dict:
        episodes = [] if keep else None
        result = evaluate_split(policy, tokenizer, make_env, split_name, n, seed, temperature, episodes)
        return with_behaviour(result, episodes) if keep else result

    def read_split(policy, keep: bool = False) -> dict:
        return read(policy, split, cfg.eval.shapes_n, shapes_seed, keep)

    def read_heldout(policy, keep: bool = False) -> dict:
        return read(policy, "heldout", cfg.eval.heldout_n, cfg.eval.heldout_seed_offset + cfg.seed, keep)

    readings, started = {}, time.perf_counter()
    averaged = AveragedModel(trainer.model, multi_avg_fn=get_ema_multi_avg_fn(average)) if average else None
    reads = {cfg.steps, *read_at} if end_only else {0, cfg.steps // 2, cfg.steps, *read_at}
    try:
        for step in range(cfg.steps + 1):
            if step in reads:
                readings[step] = read_split(trainer.model, keep=behaviour and step == cfg.steps)
                print(f"{label}: step {step:3d}: {split} pass@1 {rate_text(readings[step])} "
                      f"({time.perf_counter() - started:.0f} s)", flush=True)
            if step < cfg.steps:
                trainer.step(step)
                if averaged is not None:
                    averaged.update_parameters(trainer.model)
        arm = {"shapes": readings, "heldout": read_heldout(trainer.model, keep=behaviour)}
        print(f"{label}: step {cfg.steps}: held-out pass@1 {rate_text(arm['heldout'])}", flush=True)
        if averaged is not None:  # the same evaluation seeds as the weights' own readings: paired episode draws
            arm["average"] = {"shapes": {cfg.steps: read_split(averaged.module)},
                              "heldout": read_heldout(averaged.module)}
            name = f"{label}_average (decay {average}): step {cfg.steps}:"
            print(f"{name} {split} pass@1 {rate_text(arm['average']['shapes'][cfg.steps])}", flush=True)
            print(f"{name} held-out pass@1 {rate_text(arm['average']['heldout'])}", flush=True)
    finally:
        trainer.close()
    return arm


def group_pass_rate(result: dict, groups: list[str], group: str) -> float:
    """pass@1 over the tasks of one group (a family, a template), from evaluate_split's per-task success
    counts; groups[i] is task i's."""
    counts = [count for count, of in zip(result["per_task"], groups) if of == group]
    return sum(counts) / (len(counts) * result["n"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exp", default="tools_generated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, help="default: the preset's")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--arms", nargs="+", choices=("training", "reserved"), default=["training", "reserved"],
                        help="the arms to run (the paired interval needs both)")
    parser.add_argument("--base", choices=("training", "reserved"), default="training",
                        help="the pool the RL base's demonstrations come from (reserved: built afresh)")
    parser.add_argument("--reserved-templates", nargs="+", metavar="ID",
                        help="draw the reserved pool from these reserved templates only (default: all of them)")
    parser.add_argument("--with-training", action="store_true",
                        help="the reserved pool also holds the training pool's generated tasks")
    parser.add_argument("--set", nargs="*", action="extend", default=[], metavar="KEY=VALUE",
                        help="config overrides on top of the preset (e.g. env.generated_reshape=0.5); "
                             "several, after one --set or after several")
    parser.add_argument("--widen-edits", type=float, default=0.0, metavar="P",
                        help="a base whose demonstrations widen a share P of their Edits by unchanged lines")
    parser.add_argument("--widen-lines", type=int, default=1, metavar="K",
                        help="with --widen-edits: a widened Edit takes 1 to K more lines (drawn evenly)")
    parser.add_argument("--split", choices=("shapes", "shapes_val"), default="shapes",
                        help="the split read at step 0, half way, the end and each --read-at step (shapes_val: to "
                             "choose a recipe without reading the shapes split)")
    parser.add_argument("--read-at", type=int, nargs="+", default=[], metavar="STEP",
                        help="read the split at these steps too (beside the end, and step 0 and half way unless --end-only)")
    parser.add_argument("--average", type=float, metavar="DECAY",
                        help="also read a moving average of the weights (this decay per step) at the end")
    parser.add_argument("--end-only", action="store_true",
                        help="read the split at the end (and each --read-at step) only, not at step 0 and half way")
    parser.add_argument("--behaviour", action="store_true",
                        help="the end's readings also hold their episodes' behaviour means and, per refused-call "
                             "kind, how many episodes had one and passed")
    parser.add_argument("--out", type=Path, help="write the readings as JSON here")
    args = parser.parse_args()
    if args.widen_edits and args.base == "reserved":
        parser.error("--widen-edits builds the base from the training pool: not with --base reserved")
    if args.split == "shapes_val" and ("reserved" in args.arms or args.base == "reserved"):
        parser.error("--split shapes_val reads the training arm only: the reserved arm trains on the shapes "
                     "split's templates, which says nothing of a ceiling on shapes_val (use --arms training)")
    if args.average is not None and not 0 < args.average < 1:
        parser.error(f"--average takes a decay strictly between 0 and 1, got {args.average}")
    if not 0 <= args.widen_edits <= 1 or args.widen_lines < 1:
        parser.error("--widen-edits takes a share in [0, 1] and --widen-lines a count of at least 1")
    try:  # --steps composed with the rest, so that validation sees it (an lr schedule's steps, --read-at)
        cfg = composed(args.exp, args.seed, args.threads, [*args.set, *([f"steps={args.steps}"] if args.steps else [])])
    except UserError as err:
        parser.error(str(err))
    if any(not 0 < step < cfg.steps for step in args.read_at):
        parser.error(f"--read-at takes steps strictly between 0 and the run's last ({cfg.steps})")
    if cfg.env.generated_tasks <= 0:
        raise SystemExit(f"+exp={args.exp} trains on no generated tasks: the reserved arm would have none to swap")
    set_torch_threads(cfg.threads)
    tokenizer = build_tokenizer_for(cfg)
    make_env, close_env = make_env_factory(cfg.env)
    try:
        sandbox = env_sandbox(make_env)
        pools = {}
        if "training" in args.arms:
            pools["training"] = generator.training_pool(cfg.env, sandbox)
        if "reserved" in args.arms or args.base == "reserved":
            seed = cfg.env.generated_seed + RESERVED_SEED_OFFSET
            pools["reserved"] = reserved_pool(cfg.env.generated_tasks, seed, sandbox, args.reserved_templates)
            if args.with_training:  # the training pool's generated tasks too: training shapes widened by some reserved ones
                pools["reserved"] += generator.training_pool(cfg.env, sandbox)[len(make_tasks("train")):]
        if args.widen_edits:
            base = widened_base(cfg, tokenizer, args.widen_edits, args.widen_lines)
        elif args.base == "reserved":
            base = reserved_base(cfg, tokenizer, pools["reserved"])
            pools = {label: pool for label, pool in pools.items() if label in args.arms}
        else:
            base = build_starting_policy(cfg.policy, tokenizer, env_cfg=cfg.env)
        widened = f" (Edits widened: {args.widen_edits}, 1-{args.widen_lines} lines)" if args.widen_edits else ""
        print(f"+exp={args.exp} {' '.join(args.set)} seed {cfg.seed}, {cfg.steps} steps, base from the {args.base} pool"
              f"{widened}; pools: "
              + ", ".join(f"{label} {len(pool)} tasks" for label, pool in pools.items()), flush=True)
        arms = {label: run_arm(cfg, base, tokenizer, make_env, pool, label, args.split, tuple(args.read_at),
                               args.average, args.end_only, args.behaviour)
                for label, pool in pools.items()}
        arms.update({f"{label}_average": arm.pop("average") for label, arm in list(arms.items()) if "average" in arm})
    finally:
        close_env()
    final = {label: arm["shapes"][cfg.steps] for label, arm in arms.items()}
    diff = None
    if {"reserved", "training"} <= set(final):
        diff = paired_summary(final["reserved"]["per_task"], final["training"]["per_task"], cfg.eval.shapes_n)
        print(f"{args.split} at step {cfg.steps}, reserved - training: {diff['diff']:+.3f} [{diff['ci'][0]:+.3f}, "
              f"{diff['ci'][1]:+.3f}] ({diff['tasks']} tasks x {cfg.eval.shapes_n}, seed {cfg.seed})")
    families = [task.family for task in make_tasks(args.split)]  # the order evaluate_split counts them in
    for family in sorted(set(families)):
        rates = {label: group_pass_rate(result, families, family) for label, result in final.items()}
        print(f"  {family:8s} " + "  ".join(f"{label} {rate:.3f}" for label, rate in rates.items()))
    templates = [generator.template_id(task) for task in make_tasks(args.split)]
    for template in sorted(set(templates)):
        rates = {label: group_pass_rate(result, templates, template) for label, result in final.items()}
        print(f"  {template:28s} " + "  ".join(f"{label} {rate:.3f}" for label, rate in rates.items()))
    if args.out:
        args.out.write_text(json.dumps({"exp": args.exp, "split": args.split, "overrides": args.set, "reserved_templates": args.reserved_templates,
                                        "with_training": args.with_training, "average": args.average, "seed": cfg.seed, "steps": cfg.steps,
                                        "base": args.base, "widen_edits": args.widen_edits, "widen_lines": args.widen_lines, "arms": arms,
                                        "reserved_minus_training": diff}, indent=1, default=str))


if __name__ == "__main__":
    main()
