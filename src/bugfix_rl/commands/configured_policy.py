"""The policy, tokenizer and env as the train config builds them, for the commands that run the policy
outside training (preflight, sft, bench)."""

from __future__ import annotations

from contextlib import contextmanager

from bugfix_rl.kernels import set_torch_threads


@contextmanager
def configured_policy(cfg):
    """(policy, tokenizer, make_env) as the train config builds them, with torch's threads set; the env
    (its sandbox, for env=tools) is closed on exit."""
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.progress import PhaseProgress
    from bugfix_rl.recipes.starting_policy import build_starting_policy

    set_torch_threads(cfg.threads)
    tokenizer = build_tokenizer_for(cfg)
    make_env, close_env = make_env_factory(cfg.env)
    try:
        progress = PhaseProgress(bars=cfg.logger.console)
        yield build_starting_policy(cfg.policy, tokenizer, env_cfg=cfg.env, progress=progress), tokenizer, make_env
    finally:
        close_env()
