"""`bugfix-rl starts [starts.policies=[...]]`: the starting policies RL could begin from, compared."""

from __future__ import annotations

import torch
from rich.table import Table

from bugfix_rl.kernels import set_torch_threads
from bugfix_rl.present.terminal import output_console


def starting_policy(cfg, name: str, tokenizer, make_env, progress=None):
    """(model, SFT losses or None) for one entry of starts.policies: rl_base and scratch are policy.init's
    options, sft is the RL base after the cold start configured in cold_start.*, anything else a checkpoint
    path. The RL base is built (or loaded from its cache) only when asked for."""
    from bugfix_rl.policy.build import build_policy
    from bugfix_rl.recipes.cold_start import cold_start
    from bugfix_rl.recipes.starting_policy import build_starting_policy

    if name not in ("rl_base", "sft"):
        torch.manual_seed(cfg.starts.seed)  # scratch's random weights: the same on every run
        return build_policy(cfg.policy, tokenizer, init=name), None
    model = build_starting_policy(cfg.policy, tokenizer, init="rl_base", env_cfg=cfg.env, progress=progress)
    return model, (cold_start(cfg, model, tokenizer, make_env) if name == "sft" else None)


def starts_command(cfg) -> list:
    """`bugfix-rl starts [starts.policies=[rl_base,sft,scratch]]`: what RL can start from (§19.2).

    rl_base and scratch are policy.init's options; sft is the RL base after the cold start configured
    in cold_start.* (SFT on oracle demonstrations); anything else is a checkpoint path."""
    from bugfix_rl.commands.inputs import check_starts
    from bugfix_rl.evaluate.starts import HEADER, profile_cells, profile_policy
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.progress import PhaseProgress

    starts = cfg.starts
    check_starts(starts)  # the CLI checked it before any folder was made; a caller from Python gets it here
    set_torch_threads(cfg.threads)
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
