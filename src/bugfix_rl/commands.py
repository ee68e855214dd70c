"""Bodies of the non-train commands: preflight, sft, eval, report (bench: bench.py; simulate: simulate.py)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import torch
from rich.console import Console

from bugfix_rl.console import TrainConsole


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
    """Print the preflight checks on the first batch (nine, plus the rollout pool's two); True iff all pass."""
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
    console = Console(highlight=False)
    console.print(f"SFT ({cfg.cold_start.source}, {cfg.cold_start.steps} steps): loss {losses[0]:.3f} -> {losses[-1]:.4f}")
    lo, hi = val["ci"]
    console.print(f"validation pass@1 {val['pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}] ({val['tasks']} tasks x "
                  f"{val['n']} episodes, 1 seed)")
    console.print(f"wrote {path}  (train from it: bugfix-rl train policy.init={path})", soft_wrap=True)
    return path


def eval_command(cfg) -> dict:
    """`bugfix-rl eval ckpt=<file> [compare=<file>] split=... n=...`: print the evaluation, optionally save it."""
    from bugfix_rl.errors import UserError
    from bugfix_rl.evaluate.checkpoint_eval import run_eval
    from bugfix_rl.evaluate.tables import print_eval

    torch.set_num_threads(cfg.threads)
    try:
        result = run_eval(cfg.ckpt, cfg.split, cfg.n, cfg.seed, cfg.top, cfg.compare)
    except ValueError as err:
        raise UserError(str(err)) from None
    print_eval(result, Console(highlight=False))
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
    print_report(report, Console(highlight=False))
    print("wrote " + ", ".join(str(p) for p in write_report(report)))
    return report
