"""Learning is real, determinism holds, and the checkpoint/eval hook never moves the training stream."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from bugfix_rl.algo.advantage_stage import compute_advantages
from bugfix_rl.algo.update import policy_update
from bugfix_rl.gym.envs import make_env_factory
from bugfix_rl.rollout.collect import collect_step
from bugfix_rl.rollout.pool import InlinePool
from bugfix_rl.run.trainer import Trainer
from bugfix_rl.run.training import run_training
from bugfix_rl.types import collate
from tests.conftest import small_config


def _train(model, tokenizer, cfg, steps):
    torch.manual_seed(cfg.seed)
    make_env, _ = make_env_factory(cfg.env)
    trainer = Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(cfg.seed))
    return [trainer.step(step) for step in range(steps)]


def test_training_reward_rises(base_copy, tokenizer):
    cfg = small_config()
    rows = _train(base_copy, tokenizer, cfg, 12)
    early = sum(r["reward"] for r in rows[:3]) / 3
    late = sum(r["reward"] for r in rows[-3:]) / 3
    assert late > early + 0.15, (early, late)
    assert rows[-1]["reads"] > rows[0]["reads"]


def test_parameters_change_after_one_step(base_copy, rl_base, tokenizer):
    _train(base_copy, tokenizer, small_config(), 1)
    changed = [not torch.equal(p, q) for p, q in zip(base_copy.parameters(), rl_base.parameters())]
    assert all(changed), f"{sum(changed)} of {len(changed)} tensors changed"


def test_same_seed_same_threads_bit_identical(rl_base, tokenizer):
    torch.set_num_threads(1)
    a, b = copy.deepcopy(rl_base), copy.deepcopy(rl_base)
    _train(a, tokenizer, small_config(), 3)
    _train(b, tokenizer, small_config(), 3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    c = copy.deepcopy(rl_base)
    _train(c, tokenizer, small_config(seed=1), 3)
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))


def test_checkpoint_and_eval_hook_do_not_perturb_training(tmp_path):
    """Final weights of a run validated at every step equal those of a run validated only at the end."""
    from bugfix_rl.checkpoint import load_checkpoint

    with_hook = small_config(**{"eval.ckpt_every": 1, "steps": 4})
    without = small_config(**{"eval.ckpt_every": 0, "steps": 4})
    run_training(with_hook, tmp_path / "hook")
    run_training(without, tmp_path / "plain")
    a, _ = load_checkpoint(tmp_path / "hook" / "checkpoints" / "step_004.safetensors")
    b, _ = load_checkpoint(tmp_path / "plain" / "checkpoints" / "step_004.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows_a = [json.loads(line) for line in open(tmp_path / "hook" / "metrics.jsonl")]
    rows_b = [json.loads(line) for line in open(tmp_path / "plain" / "metrics.jsonl")]
    assert [r["reward"] for r in rows_a] == [r["reward"] for r in rows_b]
    assert len(list((tmp_path / "hook" / "checkpoints").glob("*.safetensors"))) == 5  # steps 0..4


def test_run_writes_eval_json_interface(tmp_path):
    cfg = small_config(**{"eval.ckpt_every": 1, "steps": 2, "eval.test": True})
    result = run_training(cfg, tmp_path)
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["chosen_step"] == result["chosen_step"]
    for step in ("0", "1", "2"):
        v = saved["validation"][step]
        assert set(v) >= {"pass_at_1", "ci", "per_task"}
    for name in ("base", "chosen"):
        assert set(saved["test"][name]) >= {"pass_at_1", "ci", "per_task"}
    assert set(saved["test"]["paired_diff"]) >= {"diff", "ci"}
    assert saved["config"]["seed"] == cfg.seed and saved["config"]["threads"] == cfg.threads
    assert "torch" in saved["config"]["versions"]
    summary = (tmp_path / "summary.md").read_text()
    assert "dashboard.png" in summary and (tmp_path / "dashboard.png").stat().st_size > 0


def test_sampler_records_token_in_token_out(rl_base, tokenizer):
    cfg = small_config()
    make_env, _ = make_env_factory(cfg.env)
    from bugfix_rl.gym.tasks import make_tasks

    rollouts = collect_step(InlinePool(rl_base, tokenizer, make_env), make_tasks("train"), cfg.algo,
                            torch.Generator().manual_seed(0))
    assert len(rollouts.kept) == cfg.algo.group_size * cfg.algo.prompts_per_step
    batch = collate(rollouts.kept)
    compute_advantages(batch, rollouts.kept, cfg.algo, rl_base.cfg.max_len)
    for row, traj in enumerate(rollouts.kept):
        # every policy token carries the log-prob it was sampled with; observation tokens carry none
        assert all(lp <= 0 for lp, m in zip(traj.sampler_logp, traj.policy_mask) if m)
        assert any(lp < 0 for lp, m in zip(traj.sampler_logp, traj.policy_mask) if m)
        assert all(lp == 0 for lp, m in zip(traj.sampler_logp, traj.policy_mask) if not m)
        assert batch.mask[row].sum() == traj.policy_tokens
    metrics = policy_update(copy.deepcopy(rl_base), torch.optim.Adam(rl_base.parameters(), lr=0.0), batch, cfg.algo,
                            torch.Generator().manual_seed(0))
    assert metrics["logp_gap"] < 1e-4


@pytest.mark.parametrize("algo", [{}, {"algo.kl_coef": 0.05, "algo.kl_kind": "k3", "algo.lr_schedule": "linear",
                                      "algo.lr_warmup_steps": 1}], ids=["no_kl", "kl_in_loss_lr_schedule"])
def test_resume_from_checkpoint_is_bit_identical(tmp_path, algo):
    """A run stopped after its step-2 checkpoint and resumed from it ends with the same weights; with
    KL in the loss this needs the resumed run's reference to be the starting policy, not the resumed
    weights (algo=grpo_kl's KL); with an lr schedule, each step's lr from its step, not the one the
    checkpoint's optimizer state saved."""
    from bugfix_rl.checkpoint import load_checkpoint

    full = small_config(**{"eval.ckpt_every": 2, "steps": 4, **algo})
    run_training(full, tmp_path / "full")
    resumed = small_config(**{"eval.ckpt_every": 2, "steps": 4, **algo,
                              "resume": str(tmp_path / "full" / "checkpoints" / "step_002.safetensors")})
    run_training(resumed, tmp_path / "resumed")
    a, _ = load_checkpoint(tmp_path / "full" / "checkpoints" / "step_004.safetensors")
    b, _ = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "step_004.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a if k.startswith("model."))
    rows = [json.loads(line) for line in open(tmp_path / "resumed" / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    full_rows = [json.loads(line) for line in open(tmp_path / "full" / "metrics.jsonl")]
    assert [r["lr"] for r in rows] == [r["lr"] for r in full_rows]


def test_weights_only_checkpoint_cannot_resume(tmp_path):
    import pytest

    from bugfix_rl.checkpoint import CheckpointError, save_checkpoint

    path = save_checkpoint(tmp_path / "w.safetensors", {"model.x": torch.zeros(1)}, {"kind": "policy", "step": 1})
    with pytest.raises(CheckpointError):
        run_training(small_config(resume=str(path)), tmp_path / "run")
