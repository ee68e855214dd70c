"""Bodies of the non-train commands: preflight, sft, starts, eval, report (bench: bench.py; simulate:
simulate.py; plan: plan.py)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import torch
from rich.table import Table

from bugfix_rl.console import TrainConsole
from bugfix_rl.terminal import output_console


@contextmanager
def configured_policy(cfg):
    """(policy, tokenizer, make_env) as the train config builds them, with torch's threads set; the env
    (its sandbox, for env=tools) is closed on exit."""
    from bugfix_rl.progress import PhaseProgress
    from bugfix_rl.envs import make_env_factory
    from bugfix_rl.policy.build import build_policy, build_tokenizer_for

    torch.set_num_threads(cfg.threads)
    tokenizer = build_tokenizer_for(cfg)
    make_env, close_env = make_env_factory(cfg.env)
    try:
        progress = PhaseProgress(bars=cfg.logger.console)
        yield build_policy(cfg.policy, tokenizer, env_cfg=cfg.env, progress=progress), tokenizer, make_env
    finally:
        close_env()


def preflight_command(cfg) -> bool:
    """Print the preflight checks on the first batch (ten, plus the rollout pool's one or two); True iff all pass."""
    from bugfix_rl.preflight import run_preflight

    with configured_policy(cfg) as (model, tokenizer, make_env):
        checks = run_preflight(cfg, model, tokenizer, make_env)
    view = TrainConsole(cfg)
    view.enabled = True
    view.preflight(checks)
    ok = all(c["ok"] for c in checks.values())
    view.print(f"preflight: all {len(checks)} checks hold" if ok else "[red]preflight FAILED[/red]")
    return ok


def sft_command(cfg, run_dir: Path) -> Path:
    """`bugfix-rl sft [cold_start.* overrides]`: SFT the configured policy on the cold-start demonstrations,
    save it as <run dir>/sft.safetensors (usable as policy.init=<path>) and print its validation pass@1."""
    from bugfix_rl.checkpoint import model_tensors, save_checkpoint
    from bugfix_rl.train import checkpoint_meta, cold_start, evaluate_split

    with configured_policy(cfg) as (model, tokenizer, make_env):
        losses = cold_start(cfg, model, tokenizer, make_env)
        path = Path(run_dir) / "sft.safetensors"
        save_checkpoint(path, model_tensors(model), {**checkpoint_meta(cfg, 0, tokenizer), "sft_losses": losses})
        val = evaluate_split(model, tokenizer, make_env, "val", cfg.eval.n_val, cfg.eval.val_seed,
                             cfg.algo.temperature)
    console = output_console()
    console.print(f"SFT ({cfg.cold_start.source}, {cfg.cold_start.steps} steps): loss {losses[0]:.3f} -> {losses[-1]:.4f}")
    lo, hi = val["ci"]
    console.print(f"validation pass@1 {val['pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}] ({val['tasks']} tasks x "
                  f"{val['n']} episodes, 1 seed)")
    console.print(f"wrote {path}  (train from it: bugfix-rl train policy.init={path})", soft_wrap=True)
    return path


def starting_policy(cfg, name: str, tokenizer, make_env, progress=None):
    """(model, SFT losses or None) for one entry of starts.policies: rl_base and scratch are policy.init's
    options, sft is the RL base after the cold start configured in cold_start.*, anything else a checkpoint
    path. The RL base is built (or loaded from its cache) only when asked for."""
    from bugfix_rl.policy.build import build_policy
    from bugfix_rl.train import cold_start

    if name not in ("rl_base", "sft"):
        torch.manual_seed(cfg.starts.seed)  # scratch's random weights: the same on every run
        return build_policy(cfg.policy, tokenizer, init=name), None
    model = build_policy(cfg.policy, tokenizer, init="rl_base", env_cfg=cfg.env, progress=progress)
    return model, (cold_start(cfg, model, tokenizer, make_env) if name == "sft" else None)


def starts_command(cfg) -> list:
    """`bugfix-rl starts [starts.policies=[rl_base,sft,scratch]]`: what RL can start from (§19.2).

    rl_base and scratch are policy.init's options; sft is the RL base after the cold start configured
    in cold_start.* (SFT on oracle demonstrations); anything else is a checkpoint path."""
    from bugfix_rl.envs import make_env_factory
    from bugfix_rl.evaluate.starts import HEADER, profile_cells, profile_policy
    from bugfix_rl.inputs import check_starts
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.progress import PhaseProgress

    starts = cfg.starts
    check_starts(starts)  # the CLI checked it before any folder was made; a caller from Python gets it here
    torch.set_num_threads(cfg.threads)
    tokenizer = build_tokenizer_for(cfg)
    make_env, close_env = make_env_factory(cfg.env)
    profiles = []
    try:
        for name in starts.policies:
            model, losses = starting_policy(cfg, name, tokenizer, make_env, PhaseProgress(bars=cfg.logger.console))
            if losses:
                name = f"sft ({cfg.cold_start.steps} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f})"
            profiles.append(profile_policy(name, model.eval(), tokenizer, make_env, cfg.algo.temperature,
                                           starts.n, starts.group_size, starts.seed))
    finally:
        close_env()
    table = Table(title=f"starting policies on the {profiles[0].tasks} training tasks ({starts.n} episodes per task"
                        f" for pass@k; one group of {starts.group_size} per task; 95% Wilson intervals over tasks)")
    for column in HEADER:
        table.add_column(column)
    for profile in profiles:
        table.add_row(*profile_cells(profile))
    output_console().print(table)
    return profiles


def eval_command(cfg) -> dict:
    """`bugfix-rl eval ckpt=<file or run dir> [compare=<file or run dir>] split=... n=...`: print the
    evaluation (a run dir: its chosen checkpoint), optionally save it."""
    from bugfix_rl.errors import UserError
    from bugfix_rl.evaluate.checkpoint_eval import run_eval
    from bugfix_rl.evaluate.tables import print_eval
    from bugfix_rl.inputs import checkpoint_of

    torch.set_num_threads(cfg.threads)
    ckpt, compare = checkpoint_of(cfg.ckpt), cfg.compare and checkpoint_of(cfg.compare)  # a run dir: its chosen one
    try:
        result = run_eval(ckpt, cfg.split, cfg.n, cfg.seed, cfg.top, compare,
                          cfg.explain_below if cfg.explain else None)
    except ValueError as err:
        raise UserError(str(err)) from None
    print_eval(result, output_console())
    if cfg.out:
        out = Path(cfg.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        print(f"wrote {out}")
    return result


def report_command(cfg):
    """`bugfix-rl report dir=<sweep dir> [reference=<arm>]`: ablation table, report.md, forest plot, power."""
    from bugfix_rl.errors import UserError
    from bugfix_rl.evaluate.ablation import ReportError, build_report, write_report
    from bugfix_rl.evaluate.tables import print_report

    try:
        report = build_report(cfg.dir, cfg.reference)
    except ReportError as err:
        raise UserError(str(err)) from None
    print_report(report, output_console())
    from bugfix_rl.viewer import write_sweep_page  # the same table as a page linking each run's viewer.html

    print("wrote " + ", ".join(str(p) for p in [*write_report(report), write_sweep_page(report)]))
    return report
