"""`bugfix-rl preflight [train overrides]`: the invariants of one update on the first batch, printed."""

from __future__ import annotations

from bugfix_rl.commands.configured_policy import configured_policy
from bugfix_rl.present.console import TrainConsole


def preflight_command(cfg) -> bool:
    """Print the preflight checks on the first batch (ten, plus the rollout pool's one or two); True iff all pass."""
    from bugfix_rl.run.preflight import run_preflight

    with configured_policy(cfg) as (model, tokenizer, make_env):
        checks = run_preflight(cfg, model, tokenizer, make_env)
    view = TrainConsole(cfg)
    view.enabled = True
    view.preflight(checks)
    ok = all(c["ok"] for c in checks.values())
    view.print(f"preflight: all {len(checks)} checks hold" if ok else "[red]preflight FAILED[/red]")
    return ok
