"""The policy a run starts from, by `policy.init`: TinyAgent's RL base (`rl_base`: built by its recipe,
recipes/rl_base.py, or loaded from the cache or the package), or what the policy registry makes
(policy/build.build_policy: scratch, a chat model's pretrained weights, a checkpoint path). The RL base
is a recipe over the library's stages, so the registry below it cannot build it."""

from __future__ import annotations

from bugfix_rl.policy.build import build_policy
from bugfix_rl.recipes.rl_base import make_rl_base


def build_starting_policy(policy_cfg, tokenizer, init: str | None = None, env_cfg=None, progress=None):
    """The policy from `init` (default policy_cfg.init): for TinyAgent rl_base (the starting policy of
    env_cfg's env, default the edit menu), scratch or a checkpoint path; for Qwen3 pretrained or a
    checkpoint path. `progress` (progress.PhaseProgress) shows a long build, such as the RL base's."""
    init = init or policy_cfg.init
    if init == "rl_base" and policy_cfg.name == "tiny":
        return make_rl_base(tokenizer, policy_cfg, env_cfg=env_cfg, progress=progress)
    return build_policy(policy_cfg, tokenizer, init)
