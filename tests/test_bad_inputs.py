"""Bad input is one line, exit 2, and no folder under outputs/ (issue 38): what a command reads (a
resume or init checkpoint, a Qwen3 model, `starts` settings) and where it writes are checked before
Hydra creates a run dir (inputs.py), and the commands that write no files (preflight, starts) get none."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from in_process import CliResult, cli_result

from bugfix_rl.checkpoint import model_tensors, save_checkpoint
from bugfix_rl.config import TrainConfig
from bugfix_rl.policy.build import build_policy, build_tokenizer_for


def _cli(cwd: Path, *args: str) -> CliResult:
    """`bugfix-rl <args>` in `cwd`, in this process (in_process.py); the console script's own one-line exit
    is tested through a subprocess in test_cli.py and test_eval_report.py."""
    return cli_result(*args, cwd=cwd)


def _one_line_exit_2(result: CliResult, message: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert message in lines[0], lines[0]


@pytest.fixture(scope="module")
def tools_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Checkpoints of a TinyAgent built for env=tools with its copy head (what +exp=tools trains): one
    as `train` writes it (tools config, resume state), one as an RL base is cached (weights, no config)."""
    folder = tmp_path_factory.mktemp("tools_ckpt")
    cfg = TrainConfig()
    cfg.env.name, cfg.policy.copy_head = "tools", True
    tokenizer = build_tokenizer_for(cfg)
    tensors = model_tensors(build_policy(cfg.policy, tokenizer, init="scratch"))
    run = save_checkpoint(folder / "step_001.safetensors", {**tensors, "rng.generator": torch.Generator().get_state()},
                          {"kind": "policy", "step": 1, "config": dataclasses.asdict(cfg), "vocab": list(tokenizer.words),
                           "rows": [], "validation": {}, "checkpoints": {}, "optimizer_param_groups": []})
    base = save_checkpoint(folder / "rl_base_tools.safetensors", tensors, {"kind": "rl_base"})
    return {"run": run, "base": base}


def _cases(tmp: Path, ckpt: dict[str, Path]) -> list[tuple[list[str], str]]:
    (tmp / "corrupt.safetensors").write_bytes(b"not a safetensors file")
    (tmp / "a_file").write_text("")
    (tmp / "no_checkpoints").mkdir()
    for name, source in (("corrupt_run", tmp / "corrupt.safetensors"), ("tools_run", ckpt["run"])):
        (tmp / name / "checkpoints").mkdir(parents=True)  # a run dir: resume= takes its last checkpoint, checked as a file
        (tmp / name / "checkpoints" / "step_001.safetensors").write_bytes(source.read_bytes())
    return [
        (["train", "+exp=smoke", f"resume={tmp}/missing.safetensors"], "checkpoint not found"),
        (["train", "+exp=smoke", f"resume={tmp}/corrupt.safetensors"], "cannot read checkpoint"),
        (["train", "+exp=smoke", f"resume={tmp}/no_checkpoints"], "is a folder without checkpoints"),
        (["train", "+exp=smoke", f"resume={tmp}/corrupt_run"], "cannot read checkpoint"),
        (["train", "+exp=smoke", f"resume={tmp}/tools_run"], "was trained on env=tools, but this run is env=edit_menu"),
        (["train", "policy=qwen3", f"policy.model={tmp}/no_model"], "is not a local model directory"),
        (["starts", "starts.n=4"], "starts.n=4 must be >= 8"),
        (["train", "+exp=smoke", f"policy.init={ckpt['run']}"], "was trained on env=tools, but this run is env=edit_menu"),
        (["train", "+exp=smoke", f"resume={ckpt['run']}"], "was trained on env=tools, but this run is env=edit_menu"),
        (["train", "+exp=smoke", f"policy.init={ckpt['base']}"], "does not fit this model: Unexpected key(s)"),
        (["train", "+exp=smoke", f"resume={ckpt['base']}"], "has no resume state"),
        (["train", "+exp=smoke", f"hydra.run.dir={tmp}/a_file/run"], "cannot create the output dir"),
        (["train", "+exp=smoke", "seed=0,1", f"hydra.sweep.dir={tmp}/a_file/sweep", "-m"], "cannot create the output dir"),
        (["train", "algo.clip_low=-0.2"], "algo.clip_low=-0.2 must lie in [0, 1)"),
    ]


CASE_IDS = ["resume missing", "resume corrupt", "resume dir without checkpoints", "resume dir corrupt",
            "resume tools run dir", "qwen3 without model", "starts n=4", "tools ckpt as init",
            "tools ckpt as resume", "tools base as init", "tools base as resume", "run dir under a file",
            "sweep dir under a file", "clip_low<0"]


@pytest.mark.parametrize("case", range(len(CASE_IDS)), ids=CASE_IDS)
def test_bad_input_is_one_line_exit_2_and_makes_no_folder(tmp_path, tools_checkpoints, case):
    work = tmp_path / "work"
    work.mkdir()
    args, message = _cases(tmp_path, tools_checkpoints)[case]
    _one_line_exit_2(_cli(work, *args), message)
    assert list(work.iterdir()) == []  # no outputs/ folder
    assert not (tmp_path / "a_file").is_dir()


def test_preflight_and_starts_leave_no_run_dir(tmp_path):
    preflight = _cli(tmp_path, "preflight", "+exp=smoke", "threads=1")
    assert preflight.returncode == 0 and "checks hold" in preflight.stdout, preflight.stderr[-2000:]
    starts = _cli(tmp_path, "starts", "starts.policies=[scratch]", "starts.n=8", "starts.group_size=2", "threads=1")
    assert starts.returncode == 0 and "scratch" in starts.stdout, starts.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []  # they print; Hydra made no run dir holding only .hydra
