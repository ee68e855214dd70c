"""Tiny-Qwen3 fixtures, shared by the Qwen tests (`from conftest_qwen import tiny_qwen_dir, ...`).

The model directory holds a random Qwen3 (hidden 64, 2 layers, 4 heads / 2 kv heads of 16,
intermediate 128) with the stand-in tokenizer (Qwen3's special tokens and chat template), warm-started
on scripted episodes of the first two training tasks; it is built once per machine under
$BUGFIX_RL_CACHE (default ~/.cache/bugfix_rl) and loaded through the same from-directory path a
user's model takes. A copy is committed under tests/fixtures (for the pinned torch and the transformers
it names), so a fresh clone does not spend a minute building it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from in_process import CliResult, cli_result

from bugfix_rl.config import TrainConfig, set_dotted

REPO = Path(__file__).resolve().parents[1]
# Preflight / train overrides matching the warm start: first two training tasks, unrenamed, short turns.
QWEN_OVERRIDES = ["policy=qwen3", "env.rename=false", "algo.group_size=4", "algo.prompts_per_step=2",
                  "policy.max_new_tokens=64", "env.max_turns=4"]


def cache_dir() -> Path:
    return Path(os.environ.get("BUGFIX_RL_CACHE", Path.home() / ".cache" / "bugfix_rl"))


FIXTURES = REPO / "tests" / "fixtures"  # the committed tiny Qwen3 (scripts/tiny_qwen_fixture.py writes it)


@pytest.fixture(scope="session")
def tiny_qwen_dir() -> Path:
    """The committed tiny Qwen3 when its name (key) is this code's and these libraries', else the one
    built once under the cache (the same recipe: cached_tiny_qwen)."""
    from bugfix_rl.recipes.tiny_qwen import cached_tiny_qwen, tiny_qwen_name

    committed = FIXTURES / tiny_qwen_name()
    if (committed / "config.json").is_file():
        return committed
    torch.set_num_threads(2)
    return cached_tiny_qwen(cache_dir())


def qwen_config(model_dir: Path, env: str = "edit_menu", **overrides) -> TrainConfig:
    """A TrainConfig for the tiny Qwen3 (same settings as QWEN_OVERRIDES)."""
    cfg = TrainConfig()
    cfg.policy.name, cfg.policy.init, cfg.policy.model = "qwen3", "pretrained", str(model_dir)
    cfg.policy.max_len, cfg.policy.max_new_tokens = 4096, 64
    cfg.env.name, cfg.env.rename, cfg.env.max_turns = env, False, 4
    cfg.algo.group_size, cfg.algo.prompts_per_step = 4, 2
    for key, value in overrides.items():
        set_dotted(cfg, key, value)
    return cfg


@pytest.fixture(scope="session")
def tiny_qwen(tiny_qwen_dir):
    """(policy, tokenizer) for the edit menu."""
    from bugfix_rl.policy.build import build_policy, build_tokenizer_for

    cfg = qwen_config(tiny_qwen_dir)
    tokenizer = build_tokenizer_for(cfg)
    return build_policy(cfg.policy, tokenizer), tokenizer


def run_cli(*args: str) -> CliResult:
    """`bugfix-rl <args>` from the repository root, in this process (tests/in_process.py): a fresh
    interpreter would spend seconds importing transformers before each run."""
    return cli_result(*args, cwd=REPO)
