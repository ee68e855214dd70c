"""The book's two Qwen3 labs as experiments (+exp=qwen_menu, +exp=qwen_tools) with the book's result
capture, and SFT through the chat path: on CPU with the tests' tiny random Qwen3."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from conftest_qwen import QWEN_OVERRIDES, qwen_config, run_cli, tiny_qwen, tiny_qwen_dir  # noqa: F401
from logprob_checks import sampler_and_trainer_logprobs

from bugfix_rl.algo.sft import sft_train
from bugfix_rl.gym.envs import make_env_factory, oracle_for
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.build import build_policy, build_tokenizer_for
from bugfix_rl.recipes.demonstrations import oracle_demonstrations
from bugfix_rl.rollout.collect import sample_groups


@pytest.mark.parametrize("env", ["edit_menu", "tools"])
def test_chat_oracle_demonstrations_solve_and_follow_the_token_path(tiny_qwen_dir, env):
    cfg = qwen_config(tiny_qwen_dir, env=env, **{"policy.max_new_tokens": 256})
    tokenizer = build_tokenizer_for(cfg)
    policy = build_policy(cfg.policy, tokenizer)
    make_env, close = make_env_factory(cfg.env)
    try:
        demos = oracle_demonstrations(make_tasks("train"), 5, make_env, tokenizer, oracle_for(cfg.env), 0,
                                      model=policy)
    finally:
        close()
    assert all(t.info.success and t.reward == 1.0 for t in demos)
    for demo in demos:  # the demonstrated turns are exactly the ids a sampled episode would mark as policy
        assert policy.structural_policy_mask(demo) == demo.policy_mask
        text = policy.path.decode(demo.ids)
        assert text.count("<tool_call>") == text.count("</tool_call>") >= (3 if env == "edit_menu" else 2)


def test_sft_through_the_chat_path_lowers_the_nll_and_keeps_the_token_path(tiny_qwen_dir):
    torch.manual_seed(0)
    cfg = qwen_config(tiny_qwen_dir)
    tokenizer = build_tokenizer_for(cfg)
    policy = copy.deepcopy(build_policy(cfg.policy, tokenizer))
    make_env, close = make_env_factory(cfg.env)
    try:
        demos = oracle_demonstrations(make_tasks("train"), 8, make_env, tokenizer, oracle_for(cfg.env), 0,
                                      model=policy)
        losses = sft_train(policy, demos, steps=8, lr=1e-3, batch_size=4, generator=torch.Generator().manual_seed(0))
        assert losses[-1] < 0.5 * losses[0]  # the demonstrations' NLL falls
        episodes = sample_groups(policy, tokenizer, make_tasks("train")[:2], 2, make_env, 1.0,
                                 torch.Generator().manual_seed(1))
    finally:
        close()
    trainer, sampler = sampler_and_trainer_logprobs(policy, episodes, tokenizer.pad_id)
    assert float((trainer - sampler).abs().max()) < 1e-4  # sampler and trainer agree after SFT
    assert all(policy.structural_policy_mask(t) == t.policy_mask for t in episodes)


# qwen_menu is slow: the lab machinery is qwen_tools' too, and the edit menu's chat path is checked by
# tests/test_qwen.py (preflight on both envs)
@pytest.mark.parametrize("lab", [pytest.param("qwen_menu", marks=pytest.mark.slow), "qwen_tools"])
def test_the_book_lab_runs_two_steps_and_saves_what_the_book_saved(tiny_qwen_dir, tmp_path, lab):
    small = ["steps=2", "threads=1", "preflight=false", "algo.group_size=2", "algo.prompts_per_step=2",
             "eval.n_val=1", "eval.heldout_n=1", "env.rename=false", "env.max_turns=3",
             "policy.max_new_tokens=48", "policy.generation_batch=0", "policy.gradient_checkpointing=false"]
    result = run_cli("train", f"+exp={lab}", f"policy.model={tiny_qwen_dir}", *small, f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = json.loads((tmp_path / "eval.json").read_text())
    assert out["config"]["experiment"] == lab and out["config"]["resolved"]["policy"]["name"] == "qwen3"
    assert out["config"]["resolved"]["algo"]["lr"] == 1e-6
    for key in ("heldout", "heldout_base"):  # before and after on all 10 held-out tasks, with counts and tools
        assert len(out[key]["per_task"]) == 10 and "behaviour" in out[key]
    assert "heldout_paired_diff" in out
    run = out["run"]
    assert run["wall_seconds"] > 0 and run["peak_device_memory_mb"] is None  # no CUDA device here
    assert [t["function"]["name"] for t in run["tool_schema"]] == (
        ["read", "edit", "test", "submit"] if lab == "qwen_menu" else ["Read", "Edit", "Write", "Bash"])
    assert (run["resource_limits"] is not None) == (lab == "qwen_tools")
    transcripts = tmp_path / "transcripts"
    for name, count in (("heldout_base.txt", 10), ("heldout_chosen.txt", 10), ("train_step0.txt", 20)):
        assert (transcripts / name).read_text().count("\n## ") + 1 == count, name
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_every_training_task_has_a_solving_tools_demonstration(tiny_qwen_dir):
    """Including the ops that only insert lines (add_zero_guard): the Edit's old_string is widened to a
    unique, non-empty run of lines."""
    cfg = qwen_config(tiny_qwen_dir, env="tools", **{"policy.max_new_tokens": 256})
    tokenizer = build_tokenizer_for(cfg)
    policy = build_policy(cfg.policy, tokenizer)
    make_env, close = make_env_factory(cfg.env)
    try:
        tasks = make_tasks("train")
        demos = oracle_demonstrations(tasks, len(tasks), make_env, tokenizer, oracle_for(cfg.env), 0, model=policy)
    finally:
        close()
    assert [t.info.task for t in demos if not t.info.success] == []
