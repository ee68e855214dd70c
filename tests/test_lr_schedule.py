"""algo.lr_schedule and algo.lr_warmup_steps: each RL step's learning rate, by hand, in the rows and in Adam."""

from __future__ import annotations

import copy

import pytest
import torch

from bugfix_rl.algo.lr_schedule import DECAYS, lr_factor
from bugfix_rl.config import ConfigError, validate
from bugfix_rl.config.validate import CHOICES
from bugfix_rl.gym.envs import make_env_factory
from bugfix_rl.policy.build import build_policy, build_tokenizer_for
from bugfix_rl.run.trainer import Trainer
from tests.conftest import small_config


def test_factors_by_hand():
    # 10 steps, 2 of warm-up: 0, 1/2, then the decay over the 8 steps left
    assert [lr_factor("linear", s, 10, 2) for s in (0, 1, 2, 6, 9)] == pytest.approx([0, 0.5, 1, 0.5, 0.125])
    assert [lr_factor("cosine", s, 10, 2) for s in (2, 6)] == pytest.approx([1, 0.5])
    assert lr_factor("cosine", 9, 10, 2) == pytest.approx(0.5 * (1 + math_cos(7 / 8)))
    assert [lr_factor("constant", s, 10, 2) for s in (1, 2, 9)] == [0.5, 1.0, 1.0]
    assert all(lr_factor("constant", s, 10) == 1.0 for s in range(10))  # exactly 1: runs keep their arithmetic
    assert lr_factor("linear", 12, 10) == 0.0 and lr_factor("cosine", 12, 10) == pytest.approx(0.0)  # past the end
    # warmup-stable-decay: 90 steps, the last 30 decaying; the first 60 exactly those of a constant run
    assert all(lr_factor("cosine", s, 90, decay=30) == 1.0 for s in range(61))
    assert lr_factor("cosine", 75, 90, decay=30) == pytest.approx(0.5)
    assert lr_factor("linear", 84, 90, warmup=2, decay=30) == pytest.approx(0.2)
    assert [lr_factor("linear", s, 90, warmup=2, decay=30) for s in (1, 2, 59)] == [0.5, 1.0, 1.0]
    with pytest.raises(ValueError, match="lr_schedule='step'"):
        lr_factor("step", 0, 10)


def math_cos(fraction: float) -> float:
    import math

    return math.cos(math.pi * fraction)


def test_the_schedules_validation_allows_are_the_ones_that_exist():
    assert CHOICES["algo.lr_schedule"] == tuple(DECAYS)
    for warmup in (-1, 3):
        with pytest.raises(ConfigError, match=rf"algo.lr_warmup_steps={warmup} must lie in \[0, steps=3\)"):
            validate(small_config(**{"algo.lr_warmup_steps": warmup}))
    for decay in (-1, 3):
        with pytest.raises(ConfigError, match=rf"algo.lr_decay_steps={decay} must lie in \[0, steps - lr_warmup_steps = 2\]"):
            validate(small_config(**{"algo.lr_warmup_steps": 1, "algo.lr_decay_steps": decay, "algo.lr_schedule": "linear"}))
    validate(small_config(**{"algo.lr_warmup_steps": 1, "algo.lr_decay_steps": 2, "algo.lr_schedule": "linear"}))
    with pytest.raises(ConfigError, match="algo.lr_decay_steps=2 decays lr over the last steps: it needs algo.lr_schedule"):
        validate(small_config(**{"algo.lr_decay_steps": 2}))
    with pytest.raises(ConfigError, match="algo.lr_schedule='step' is not allowed"):
        validate(small_config(**{"algo.lr_schedule": "step"}))


def test_a_run_takes_each_steps_learning_rate():
    """3 steps, linear, 1 warm-up step: factors 0, 1, 1/2. Step 0 at lr 0 leaves every weight as it was
    (Adam's step is lr times its direction); the rows log each step's lr; the later steps move them."""
    cfg = small_config(**{"policy.init": "scratch", "algo.lr_schedule": "linear", "algo.lr_warmup_steps": 1,
                          "algo.entropy_coef": 0.01})  # a gradient at every step, whatever the rewards
    validate(cfg)
    torch.set_num_threads(1)
    tokenizer = build_tokenizer_for(cfg)
    torch.manual_seed(0)
    model = build_policy(cfg.policy, tokenizer)
    start = copy.deepcopy(model.state_dict())
    make_env, close_env = make_env_factory(cfg.env)
    trainer = Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(0))
    try:
        first = trainer.step(0)
        unchanged = all(torch.equal(start[k], v) for k, v in model.state_dict().items())
        rows, used = [first], [trainer.learner.optimizer.param_groups[0]["lr"]]
        for step in (1, 2):
            rows.append(trainer.step(step))
            used.append(trainer.learner.optimizer.param_groups[0]["lr"])  # what Adam stepped with
    finally:
        trainer.close()
        close_env()
    assert [row["lr"] for row in rows] == pytest.approx([0.0, 1e-3, 5e-4]) and used == pytest.approx([0.0, 1e-3, 5e-4])
    assert unchanged and first["grad_norm"] > 0  # a gradient, taken at lr 0
    assert any(not torch.equal(start[k], v) for k, v in model.state_dict().items())
