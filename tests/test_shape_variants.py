"""Shape variants of the training tasks (gym/shape_variants.py): graded by their own fix, still buggy,
built from training constants only, and never a held-out line's shape."""

import random
import re
import shutil
from pathlib import Path

import pytest
import torch

from bugfix_rl.config import AlgoConfig
from bugfix_rl.gym import ops
from bugfix_rl.gym.shape_variants import TRAIN_CONSTANTS, shape_variant, unseen_heldout_line_shapes
from bugfix_rl.gym.tasks import OPERAND_POOL, base_task_name, make_tasks, operand_names, task_by_name

TRAIN = make_tasks("train")


def _variants(per_task=12, seed=0):
    rng = random.Random(seed)
    return [(task, v) for task in TRAIN for v in (shape_variant(task, rng) for _ in range(per_task)) if v is not None]


def _params(task) -> list[str]:
    return re.findall(r"\w+", task.source.split("(", 1)[1].split(")", 1)[0])


def test_specialize_gives_a_family_another_number_of_parameters():
    """Every minmax training task has one or three parameters; specialize variants have two."""
    arities = {len(_params(v)) for t, v in _variants() if t.family == "minmax"}
    assert {len(_params(t)) for t in TRAIN if t.family == "minmax"} == {1, 3} and 2 in arities


def test_a_variant_is_graded_by_its_own_fix_and_stays_buggy():
    variants = _variants()
    assert len({v.source for _, v in variants}) > 100
    for family in ("minmax", "range", "compare", "zero", "init"):  # every family gets variants
        assert any(t.family == family for t, _ in variants), family
    for task, variant in variants:
        assert variant.split == "train" and variant.fix_op == task.fix_op and base_task_name(variant.name) == task.name
        assert variant.source != task.source
        states = ops.code_states(variant)
        assert not states[None].hidden_pass and states[None].public_pass < 1  # the bug shows in both
        assert states[variant.fix_op].hidden_pass and states[variant.fix_op].public_pass == 1
        kept = [i for i, name in enumerate(_params(task)) if name in _params(variant)]  # specialize drops one
        assert len(kept) >= len(_params(task)) - 1 and len(_params(variant)) == len(kept)
        assert [args for args, _ in variant.hidden_tests] == [tuple(args[i] for i in kept)
                                                              for args, _ in task.hidden_tests]
        assert len({repr(e) for _, e in variant.public_tests + variant.hidden_tests}) > 1  # not a constant


def test_a_variant_writes_no_heldout_shape_and_no_heldout_constant():
    """No line of a variant or of its fix is a held-out line's shape that training lacks (operand names
    blanked), and every number in it is a training constant."""
    shapes = unseen_heldout_line_shapes()
    assert "return min ( 0 , max ( N , N ) )" in shapes and "return N * 2 // N" in shapes
    assert "for N in range ( 0 , N , N ) :" in shapes
    heldout_names = {n for t in make_tasks("heldout") for n in operand_names(t)}
    for task, variant in _variants(seed=1):
        operands = set(operand_names(task))
        fixed = ops.apply_op(variant, variant.source, variant.fix_op)
        for text in (variant.source, fixed):
            for line in text.splitlines():
                words = ops._TOKEN.findall(line)
                assert " ".join("N" if w in operands else w for w in words) not in shapes, line
                assert {w for w in words if w.isdigit()} <= set(TRAIN_CONSTANTS), line
                assert not heldout_names & set(words), line


def test_shape_variants_are_made_from_training_tasks_only():
    with pytest.raises(ValueError, match="training tasks only"):
        shape_variant(task_by_name("zero/speed"), random.Random(0))


def test_rl_draws_variants_at_the_configured_rate_and_leaves_the_draw_alone_when_off():
    from bugfix_rl.rollout.collect import draw_step_tasks

    algo = AlgoConfig(prompts_per_step=200)
    off = draw_step_tasks(TRAIN, algo, torch.Generator().manual_seed(0), rename_operands=True)
    again = draw_step_tasks(TRAIN, algo, torch.Generator().manual_seed(0), rename_operands=True, shape_variants=0.0)
    assert [t.source for t in off] == [t.source for t in again]  # rate 0 draws nothing extra
    drawn = draw_step_tasks(TRAIN, algo, torch.Generator().manual_seed(0), rename_operands=True, shape_variants=0.5)
    repeat = draw_step_tasks(TRAIN, algo, torch.Generator().manual_seed(0), rename_operands=True, shape_variants=0.5)
    assert [t.source for t in drawn] == [t.source for t in repeat]  # seeded
    shaped = [t for t in drawn if re.search(r"~s[0-9a-f]{8}~", t.name)]
    assert 0.3 < len(shaped) / len(drawn) < 0.6  # ~0.5, less the rare task whose 16 tries all failed
    assert all(set(operand_names(t)) <= set(OPERAND_POOL) for t in drawn)  # renamed after shaping


def test_the_config_refuses_a_share_outside_0_1():
    from bugfix_rl.config import ConfigError, TrainConfig, validate

    cfg = TrainConfig()
    cfg.env.shape_variants = 1.5
    with pytest.raises(ConfigError, match="env.shape_variants"):
        validate(cfg)


def test_a_base_built_by_other_code_is_not_loaded(tmp_path, monkeypatch):
    """The recipe's fields do not say how its shape variants, scripted agent or env were written: the
    code's hash is in the cache key, so changing that code builds a new base instead of loading a stale
    one; a comment does not change the hash."""
    from bugfix_rl.config import TrainConfig
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.recipes import rl_base

    torch.set_num_threads(1)
    cfg = TrainConfig()
    cfg.env.name = "tools"
    cfg.policy.cache_dir = str(tmp_path)
    cfg.policy.tools_base.episodes, cfg.policy.tools_base.steps = 4, 1
    tokenizer = build_tokenizer_for(cfg)
    for version in ("a", "a", "b"):
        monkeypatch.setattr(rl_base, "base_code_version", lambda v=version: v)
        rl_base.make_rl_base(tokenizer, cfg.policy, env_cfg=cfg.env)
    assert len(list(tmp_path.glob("rl_base_tools-*.safetensors"))) == 2
    monkeypatch.undo()
    package = Path(rl_base.__file__).resolve().parents[1]
    copy = tmp_path / "bugfix_rl"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "conf"))
    real = rl_base.base_code_version(copy)
    assert real == rl_base.base_code_version(package)
    source = copy / "gym" / "shape_variants.py"
    source.write_text(source.read_text() + "\n# a comment\n")
    assert rl_base.base_code_version.__wrapped__(copy) == real
    source.write_text(source.read_text() + "\nNEW_CONSTANT = 1\n")
    assert rl_base.base_code_version.__wrapped__(copy) != real


def test_the_base_code_holds_every_module_the_model_is_built_from():
    """A module that TinyAgent's code imports from bugfix_rl.policy is hashed into the base key: a base
    built with copy_lookup.py's first rule once kept its key after the rule changed."""
    import ast
    from fnmatch import fnmatch

    from bugfix_rl.recipes import rl_base

    package = Path(rl_base.__file__).resolve().parents[1]
    seen, todo = set(), ["policy/tiny.py"]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse((package / path).read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bugfix_rl.policy."):
                todo.append(node.module.removeprefix("bugfix_rl.").replace(".", "/") + ".py")
    assert {"policy/copy_head.py", "policy/copy_lookup.py", "policy/tokenizer.py"} <= seen
    assert [p for p in sorted(seen) if not any(fnmatch(p, pattern) for pattern in rl_base.BASE_CODE)] == []
