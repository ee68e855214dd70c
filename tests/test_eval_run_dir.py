"""`bugfix-rl eval` takes a run dir (its chosen checkpoint) and refuses to pair checkpoints of two envs
(issue 38: a run dir was "not found", and McNemar was printed across envs)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from in_process import CliResult, cli_result, run_cli_in_process

from bugfix_rl.checkpoint import model_tensors, save_checkpoint
from bugfix_rl.config import TrainConfig
from bugfix_rl.policy.build import build_policy, build_tokenizer_for


def _one_line(result: CliResult) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A finished one-step `+exp=smoke` run: checkpoints 0 and 1, eval.json naming the chosen one."""
    run = tmp_path_factory.mktemp("smoke") / "run"
    run_cli_in_process("train", "+exp=smoke", "steps=1", "preflight=false", "threads=1", f"hydra.run.dir={run}")
    return run


def test_eval_of_a_run_dir_evaluates_its_chosen_checkpoint(run_dir, tmp_path):
    chosen = json.loads((run_dir / "eval.json").read_text())["chosen_step"]
    run_cli_in_process("eval", f"ckpt={run_dir}", "n=1", "threads=1", f"out={tmp_path}/eval.json")
    models = json.loads((tmp_path / "eval.json").read_text())["models"]
    assert models[0]["path"] == str(run_dir / "checkpoints" / f"step_{chosen:03d}.safetensors")
    assert models[0]["step"] == chosen


def test_eval_of_an_unfinished_run_dir_names_its_last_checkpoint(run_dir, tmp_path):
    unfinished = tmp_path / "unfinished"
    (unfinished / "checkpoints").mkdir(parents=True)
    (unfinished / "checkpoints" / "step_000.safetensors").write_bytes((run_dir / "checkpoints" / "step_000.safetensors").read_bytes())
    line = _one_line(cli_result("eval", f"ckpt={unfinished}", "n=1"))
    assert "without eval.json" in line and "step_000.safetensors" in line


def test_compare_across_envs_is_one_line_exit_2(run_dir, tmp_path):
    cfg = TrainConfig()
    cfg.env.name, cfg.policy.copy_head = "tools", True
    tokenizer = build_tokenizer_for(cfg)
    tools = save_checkpoint(tmp_path / "tools.safetensors", model_tensors(build_policy(cfg.policy, tokenizer, init="scratch")),
                            {"kind": "policy", "step": 0, "config": dataclasses.asdict(cfg), "vocab": list(tokenizer.words)})
    line = _one_line(cli_result("eval", f"ckpt={run_dir}", f"compare={tools}", "n=1"))
    assert "env=tools" in line and "env=edit_menu" in line and "one env" in line


def test_pass_at_k_with_fewer_episodes_than_k_is_not_a_number_printed_as_nan(run_dir):
    """n=2 test episodes per task (smoke): pass@4 and pass@8 do not exist; summary.md and the console's
    last lines said `nan`, now `n/a (n=2<4)`."""
    from bugfix_rl.evaluate.stats import pass_rate_summary
    from bugfix_rl.present.report_run import pass_at_text

    assert pass_at_text(pass_rate_summary(torch.tensor([1, 2, 0]), 2), 4) == "n/a (n=2<4)"
    assert pass_at_text(pass_rate_summary(torch.tensor([1, 0]), 4), 4) == "0.500"  # (1 - C(3,4)/C(4,4) + 0) / 2
    summary = (run_dir / "summary.md").read_text()
    assert "n/a (n=2<4)" in summary and "n/a (n=2<8)" in summary and "nan" not in summary


def test_the_tool_table_has_a_row_for_every_failure_kind():
    from bugfix_rl.gym.tools.calls import FAILURE_KINDS
    from bugfix_rl.present.report_run import TOOL_TABLE_ROWS

    keys = {key for _, key in TOOL_TABLE_ROWS}
    assert {f"failed_{kind}" for kind in FAILURE_KINDS} <= keys
