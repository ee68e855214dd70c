"""The RL starting policy: TinyAgent behaviour-cloned on a noisy scripted agent, cached on disk.

This is the analog of a pretrained model (SPEC §3): it emits well-formed calls, reads before editing
only sometimes, and guesses the op otherwise. The recipe is seeded and its result is cached under
`cache_dir` keyed by a hash of the recipe, the architecture and the vocabulary, so every run (and
every seed of a sweep) starts from the same weights, rebuilt in seconds when missing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from pathlib import Path

import torch

from bugfix_rl.algo.sft import sft_train
from bugfix_rl.checkpoint import CheckpointError, load_checkpoint, load_model_state, model_tensors, save_checkpoint
from bugfix_rl.gym.edit_menu import RENAME_POOL, EditMenuConfig, EditMenuEnv
from bugfix_rl.gym.tasks import OPERAND_POOL, make_tasks, with_renamed_operands
from bugfix_rl.policy.scripted import NoisyPolicy
from bugfix_rl.policy.tiny import TinyAgent, TinyAgentConfig
from bugfix_rl.policy.tokenizer import Tokenizer
from bugfix_rl.rollout.sampler import scripted_episode


def architecture(policy_cfg) -> TinyAgentConfig:
    return TinyAgentConfig(policy_cfg.d_model, policy_cfg.n_layers, policy_cfg.n_heads, policy_cfg.d_ff,
                           policy_cfg.max_len)


def noisy_demonstrations(recipe, tokenizer: Tokenizer, env_cfg: EditMenuConfig):
    """`recipe.episodes` noisy scripted episodes on renamed training tasks."""
    rng = random.Random(recipe.seed)
    tasks = make_tasks("train")
    variants = [with_renamed_operands(task, rng.sample(OPERAND_POOL, len(OPERAND_POOL)), str(k))
                for task in tasks for k in range(recipe.variants_per_task)]
    knobs = {k: getattr(recipe, k) for k in ("p_read", "p_right_after_read", "p_test", "p_wander",
                                             "p_malformed", "p_exploit")}
    demos = []
    for i in range(recipe.episodes):
        task = rng.choice(variants) if rng.random() < recipe.p_renamed_operands else tasks[i % len(tasks)]
        env = EditMenuEnv(task, env_cfg, rng.choice(RENAME_POOL))
        demos.append(scripted_episode(NoisyPolicy(rng, **knobs), env, tokenizer))
    return demos


def cache_root(policy_cfg) -> Path:
    import os

    return Path(policy_cfg.cache_dir or os.environ.get("BUGFIX_RL_CACHE") or Path.home() / ".cache" / "bugfix_rl")


def recipe_key(recipe, arch: TinyAgentConfig, tokenizer: Tokenizer) -> str:
    blob = json.dumps([dataclasses.asdict(recipe) if dataclasses.is_dataclass(recipe) else dict(recipe),
                       dataclasses.asdict(arch), tokenizer.words, torch.__version__], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def make_rl_base(tokenizer: Tokenizer, policy_cfg, cache: bool = True) -> TinyAgent:
    """Load the cached RL base or build it by the recipe (deterministic for a given thread count)."""
    recipe, arch = policy_cfg.base, architecture(policy_cfg)
    path = cache_root(policy_cfg) / f"rl_base-{recipe_key(recipe, arch, tokenizer)}.safetensors"
    model = TinyAgent(tokenizer.vocab_size, arch)
    if cache and path.is_file():
        try:
            tensors, _ = load_checkpoint(path)
            load_model_state(model, tensors, path)
            return model
        except CheckpointError:
            pass  # a damaged cache entry is rebuilt below
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)  # the base must not depend on the run's thread count
    try:
        torch.manual_seed(recipe.seed)
        model = TinyAgent(tokenizer.vocab_size, arch)
        demos = noisy_demonstrations(recipe, tokenizer, EditMenuConfig())
        sft_train(model, demos, recipe.steps, recipe.lr, recipe.batch_size, torch.Generator().manual_seed(recipe.seed))
    finally:
        torch.set_num_threads(threads)
    if cache:
        save_checkpoint(path, model_tensors(model), {"kind": "rl_base", "recipe": dataclasses.asdict(recipe)
                                                     if dataclasses.is_dataclass(recipe) else dict(recipe)})
    return model
