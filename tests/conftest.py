"""Shared fixtures: the word tokenizer, the cached RL base, and small train configs."""

from __future__ import annotations

import copy
import os

import pytest
import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch

from bugfix_rl.config import TrainConfig, set_dotted
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.tokenizer import build_tokenizer

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # local Ray clusters on 127.0.0.1 (read at import)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(make_tasks("all"))


@pytest.fixture(scope="session")
def rl_base(tokenizer):
    """The real RL base (built once per machine, then loaded from ~/.cache/bugfix_rl)."""
    from bugfix_rl.policy.rl_base import make_rl_base

    torch.set_num_threads(1)  # one thread: a busy 2-core machine makes 2 spinning threads crawl
    return make_rl_base(tokenizer, TrainConfig().policy)


@pytest.fixture
def base_copy(rl_base):
    return copy.deepcopy(rl_base)


def small_config(**overrides) -> TrainConfig:
    """A quick train config: a few steps, small groups, no console, no test eval unless asked."""
    cfg = TrainConfig()
    cfg.steps = 3
    cfg.threads = 1
    cfg.logger.console = False
    cfg.eval.n_val = 2
    cfg.eval.n_test = 2
    cfg.eval.test = False
    cfg.preflight = False
    for key, value in overrides.items():
        set_dotted(cfg, key, value)
    return cfg
