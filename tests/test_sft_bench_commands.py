"""`bugfix-rl sft` writes a checkpoint training can start from; `bugfix-rl bench` times both paths."""

from __future__ import annotations

from bugfix_rl import cli
from bugfix_rl.config import TrainConfig
from bugfix_rl.policy.build import build_policy, build_tokenizer_for


def test_sft_command_writes_a_policy_checkpoint(tmp_path, capsys):
    cli.main(["sft", "threads=1", "cold_start.demos=20", "cold_start.steps=5", "eval.n_val=2",
              f"hydra.run.dir={tmp_path}"])
    out = capsys.readouterr().out
    assert "validation pass@1" in out and "5 tasks x 2 episodes, 1 seed" in out
    cfg = TrainConfig()
    model = build_policy(cfg.policy, build_tokenizer_for(cfg), init=str(tmp_path / "sft.safetensors"))
    assert sum(p.numel() for p in model.parameters()) > 0


def test_bench_command_times_both_paths_and_reports_ratios(tmp_path, capsys):
    cli.main(["bench", "threads=1", "bench.baseline_threads=1", "bench.repeats=1", "bench.steps=2",
              "rollout.workers=2", "rollout.engine=local", "rollout.max_staleness=1", "algo.tis_cap=2.0",
              "algo.prompts_per_step=2", "algo.group_size=4", f"hydra.run.dir={tmp_path}"])
    captured = capsys.readouterr()
    out = captured.out
    said = captured.err.splitlines()  # each timed block is announced on stderr (it was silent: issue 38)
    assert said[0].startswith("bench: timing sampling + grading of one step's batch (8 episodes, env=edit_menu)")
    assert said[1].startswith("sampling timed in ")
    assert said[2].startswith("bench: timing training steps, sync, in-process, 1 threads vs 2 in-process shards")
    assert said[3].startswith("training steps timed in ")
    assert "in-process, 1 threads" in out and "2 in-process shards, 1 threads" in out
    assert "ratio single-process / 2 in-process shards" in out
    assert "training step (median of 2 steps, 1 repeats)" in out and "max_staleness=1" in out
