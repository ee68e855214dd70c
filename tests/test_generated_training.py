"""Training on generated tasks (env.generated_tasks, issue 35): off, every draw and every cache key is what
it was; on, RL groups and the RL bases draw from the book's 20 training tasks plus that many generated ones
(gym/generator.training_pool), built on the run's sandbox, never from the shapes split's templates."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import torch
from in_process import cli_result

from bugfix_rl.config import TrainConfig
from bugfix_rl.gym import generator
from bugfix_rl.gym.envs import env_sandbox, make_env_factory
from bugfix_rl.gym.generator import template_id, training_pool
from bugfix_rl.gym.shape_variants import shape_variant
from bugfix_rl.gym.task_checks import op_problem
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.gym.templates import TRAINING_TEMPLATES
from bugfix_rl.policy.tiny import architecture, new_tiny_agent
from bugfix_rl.recipes import rl_base
from bugfix_rl.rollout.collect import draw_step_tasks, with_renamed_operands_drawn
from bugfix_rl.run.trainer import Trainer
from tests.conftest import small_config

BOOK = make_tasks("train")


def _rows(tasks) -> list[tuple]:
    """What a task is, field by field (Task compares by identity)."""
    return [(t.name, t.source, t.public_tests, t.hidden_tests, t.split) for t in tasks]


def _trainer(cfg, tokenizer) -> Trainer:
    """A Trainer on a scratch TinyAgent (its draws do not depend on the weights)."""
    from bugfix_rl.sandbox import SandboxUnavailable

    try:
        make_env, close = make_env_factory(cfg.env)
    except SandboxUnavailable as error:
        pytest.skip(f"sandbox unavailable on this machine: {error}")
    model = new_tiny_agent(tokenizer, architecture(cfg.policy))
    trainer = Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(cfg.seed))
    trainer.close_env = close
    return trainer


def _draws(tasks, cfg, steps: int = 4) -> list[list[str]]:
    """The task names (augmentation tags included) of `steps` steps drawn from `tasks` as the trainer draws."""
    generator_ = torch.Generator().manual_seed(cfg.seed)
    return [[t.name for t in draw_step_tasks(tasks, cfg.algo, generator_, None, cfg.env.rename_operands,
                                             cfg.env.shape_variants)] for _ in range(steps)]


def _augmenting(**overrides) -> TrainConfig:
    """small_config with both augmentations on (the tools capstone's), so their draws are compared too."""
    return small_config(**{"env.rename_operands": True, "env.shape_variants": 0.5, "algo.prompts_per_step": 8,
                           **overrides})


def test_default_config_draws_the_book_tasks_as_before(tokenizer):
    cfg = _augmenting()
    trainer = _trainer(cfg, tokenizer)
    try:
        assert trainer.tasks == BOOK
        assert _draws(trainer.tasks, cfg) == _draws(make_tasks("train"), cfg)
    finally:
        trainer.close()
        trainer.close_env()


def test_option_on_draws_generated_tasks_from_the_run_sandbox(tokenizer, monkeypatch):
    """tools env: the pool is built on the env's own sandbox; the groups draw generated tasks, renamed,
    never shape-varied (shape variants stay with the book's tasks)."""
    seen = []
    real = generator.generated_tasks
    monkeypatch.setattr(generator, "generated_tasks",
                        lambda n, seed, sandbox, *shares: seen.append(sandbox) or real(n, seed, sandbox, *shares))
    cfg = _augmenting(**{"env.name": "tools", "env.generated_tasks": 10, "env.shape_variants": 1.0})
    trainer = _trainer(cfg, tokenizer)
    try:
        assert len(seen) == 1 and seen[0] is env_sandbox(trainer.make_env) and seen[0] is not None
        generated = trainer.tasks[len(BOOK):]
        assert trainer.tasks[:len(BOOK)] == BOOK and len(generated) == 10
        assert _rows(generated) == _rows(real(10, 0))  # the same pool whatever sandbox checked it
        names = {t.name for t in generated}
        drawn = [name for step in _draws(trainer.tasks, cfg, steps=6) for name in step]
        on_generated = [name for name in drawn if name.split("~", 1)[0] in names]
        assert on_generated, drawn
        assert all(name.count("~") == 1 for name in on_generated)  # renamed (one tag), no shape variant
        assert any(re.search(r"~s[0-9a-f]{8}~", name) for name in drawn)  # the book's are still varied
    finally:
        trainer.close()
        trainer.close_env()


def test_pool_is_deterministic_and_from_training_templates():
    cfg = TrainConfig().env
    cfg.generated_tasks, cfg.generated_seed = 10, 3
    pool = training_pool(cfg)
    assert pool[:len(BOOK)] == BOOK and _rows(pool) == _rows(training_pool(cfg))
    assert {template_id(t) for t in pool[len(BOOK):]} <= {t.id for t in TRAINING_TEMPLATES}
    cfg.generated_seed = 4
    assert _rows(training_pool(cfg)[len(BOOK):]) != _rows(pool[len(BOOK):])
    cfg.generated_tasks = 0
    assert training_pool(cfg) == BOOK and training_pool(None) == BOOK


@pytest.mark.parametrize("split", ["shapes", "shapes_val"])
def test_pool_refuses_a_shapes_split_template(split, monkeypatch):
    monkeypatch.setattr(generator, "generated_tasks", lambda n, seed, sandbox, *shares: make_tasks(split)[:n])
    cfg = TrainConfig().env
    cfg.generated_tasks = 2
    with pytest.raises(AssertionError, match="shapes split"):
        training_pool(cfg)


def test_augmentations_on_generated_tasks():
    """Renamed copies of generated tasks keep the rules (operand_names reads the syntax tree); shape
    variants skip them without a draw (a variant of a `while` body can loop forever in-process)."""
    generated = generator.generated_tasks(10, 0)
    renamed = with_renamed_operands_drawn(generated, torch.Generator().manual_seed(0))
    assert [op_problem(t) for t in renamed] == [None] * 10
    assert all(r.source != t.source for r, t in zip(renamed, generated))
    rng = random.Random(0)
    assert [shape_variant(t, rng) for t in generated] == [None] * 10
    assert rng.random() == random.Random(0).random()
    assert shape_variant(BOOK[0], random.Random(0)) is not None


@pytest.mark.parametrize("env", ["edit_menu", "tools"])
def test_base_cache_key_changes_only_when_on(tokenizer, monkeypatch, env):
    """Off (whatever env.generated_seed says), the key is the one the formula before the option gave:
    the recipe, architecture, vocabulary, code and, for the tools env, its three env fields."""
    monkeypatch.setattr(rl_base, "base_code_version", lambda package=None: "pinned")
    cfg = TrainConfig()
    cfg.env.name = env
    recipe = cfg.policy.base if env == "edit_menu" else cfg.policy.tools_base
    fields = None if env == "edit_menu" else {k: getattr(cfg.env, k) for k in ("max_turns", "max_calls_per_turn",
                                                                                "rename")}
    before = rl_base.recipe_key(recipe, architecture(cfg.policy), tokenizer, fields)
    key = lambda: rl_base.base_path(tokenizer, cfg.policy, cfg.env).name  # noqa: E731
    assert before in key()
    cfg.env.generated_seed = 7
    assert before in key()
    cfg.env.generated_tasks = 10
    on_seed_7 = key()
    cfg.env.generated_seed = 0
    on_seed_0 = key()
    assert len({before, on_seed_7, on_seed_0}) == 3 and before not in on_seed_7
    cfg.env.generated_reshape = 0.5  # a reshaped pool: other demonstrations, another base
    assert key() not in {before, on_seed_7, on_seed_0}
    cfg.env.generated_reshape = 0.0
    cfg.env.generated_grammar = 1.0  # grammar body forms: other demonstrations, another base
    on_grammar = key()
    assert on_grammar not in {before, on_seed_7, on_seed_0}
    cfg.env.generated_grammar_flat_pairs = True  # the grammar's flat pairs: another pool, another base
    assert key() not in {before, on_seed_7, on_seed_0, on_grammar}
    cfg.env.generated_grammar_flat_pairs = False
    assert key() == on_grammar
    cfg.env.generated_two_line_minmax = 0.25  # two-line minmax tasks in the pool: another base
    on_minmax = key()
    assert on_minmax not in {before, on_seed_7, on_seed_0, on_grammar}
    cfg.env.generated_two_line_compare = 0.25  # two-line compare tasks too, alone or with them: others again
    on_both = key()
    cfg.env.generated_two_line_minmax = 0.0
    on_compare = key()
    assert len({before, on_seed_7, on_seed_0, on_grammar, on_minmax, on_both, on_compare}) == 7
    cfg.env.generated_two_line_compare = 0.0
    assert key() == on_grammar
    cfg.env.generated_grammar = 0.0
    assert key() == on_seed_0


QUICK = ["steps=1", "threads=1", "eval.n_val=2", "eval.n_test=2", "logger.console=false", "preflight=false",
         "env.generated_tasks=10"]
SMALL_BASES = {"edit_menu": ["+exp=smoke", "policy.base.episodes=32", "policy.base.steps=8"],
               # as tests/test_experiments.py's tools run: a tiny tools base, entropy for a gradient
               "tools": ["+exp=tools", "eval.heldout_n=0", "eval.shapes_n=0", "policy.tools_base.episodes=16",
                         "policy.tools_base.steps=5", "algo.entropy_coef=0.01", "algo.group_size=2",
                         "algo.prompts_per_step=2"]}


@pytest.mark.parametrize("env", ["edit_menu", "tools"])
def test_one_step_smoke_with_generated_tasks(tmp_path: Path, env):
    """The RL base is built on the pool (its own cache file) and one step trains on it."""
    run = tmp_path / "run"
    result = cli_result("train", *SMALL_BASES[env], *QUICK, f"policy.cache_dir={tmp_path / 'cache'}",
                        f"hydra.run.dir={run}")  # in this process (tests/in_process.py)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.count("generating 10 training tasks (env.generated_tasks, seed 0)") == 2  # base, run
    assert (run / "eval.json").is_file() and (run / "checkpoints" / "step_001.safetensors").is_file()
