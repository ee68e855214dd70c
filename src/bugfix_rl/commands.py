"""Bodies of the non-train commands: preflight, eval, report, sft, bench."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from rich.console import Console

from bugfix_rl.console import TrainConsole


def preflight_command(cfg) -> bool:
    """Print the nine invariants on the first batch; True iff all pass."""
    from bugfix_rl.envs import make_env_factory
    from bugfix_rl.policy.build import build_policy, build_tokenizer_for
    from bugfix_rl.preflight import run_preflight

    torch.set_num_threads(cfg.threads)
    tokenizer = build_tokenizer_for(cfg)
    make_env, close_env = make_env_factory(cfg.env)
    try:
        model = build_policy(cfg.policy, tokenizer)
        checks = run_preflight(cfg, model, tokenizer, make_env)
    finally:
        close_env()
    view = TrainConsole(cfg)
    view.enabled = True
    view.preflight(checks)
    ok = all(c["ok"] for c in checks.values())
    view.print("preflight: all nine invariants hold" if ok else "[red]preflight FAILED[/red]")
    return ok
