"""Every experiment config (and every ablation arm) runs one training step, and the step changes the weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from in_process import run_cli_in_process

from bugfix_rl.checkpoint import load_checkpoint

CONF = Path(__file__).resolve().parents[1] / "conf"
# the Qwen3 labs need the tiny Qwen3 fixture: tests/test_qwen_labs.py runs them
EXPERIMENTS = sorted(p.stem for p in (CONF / "exp").glob("*.yaml") if not p.stem.startswith("qwen_"))
# copy-switch arms act only on the tools copy head: tests/test_copy_switches.py composes them there
ARMS = sorted(p.stem for p in (CONF / "ablation").glob("*.yaml") if not p.stem.startswith("copy_"))
QUICK = ["steps=1", "threads=1", "eval.n_val=2", "eval.n_test=2", "logger.console=false", "preflight=false"]


def _one_step(tmp_path: Path, *overrides: str) -> Path:
    run = tmp_path / "run"
    run_cli_in_process("train", *overrides, *QUICK, f"hydra.run.dir={run}")
    return run


# Tensors whose gradient needs an event a one-step smoke run may not have: the copy pointer's weights act
# only inside an Edit's new_string (the next-token one only after a replaced token), and the tiny base of
# the tools smoke run seldom writes a whole Edit.
EVENT_ONLY = {"model.copy.resume_weight", "model.copy.next_weight"}


def _changed(run: Path) -> bool:
    before, _ = load_checkpoint(run / "checkpoints" / "step_000.safetensors")
    after, _ = load_checkpoint(run / "checkpoints" / "step_001.safetensors")
    names = [k for k in before if k.startswith("model.") and k not in EVENT_ONLY]
    return bool(names) and all(not torch.equal(before[k], after[k]) for k in names)


# slow: these repeat a run the default suite makes anyway: smoke (tests/test_golden.py and the eval-report
# fixture train +exp=smoke), ablation (= the `default` arm of test_ablation_arm_runs_one_step_and_learns),
# capstone (tests/test_first_hour.py runs `make run`'s +exp=capstone in a terminal, all 60 steps), staleness
# (bounded staleness in process: tests/test_rollout_workers.py, its staleness and Ray tests)
SLOW_EXPERIMENTS = {"smoke", "ablation", "capstone", "staleness"}


@pytest.mark.parametrize("experiment", [pytest.param(e, marks=pytest.mark.slow) if e in SLOW_EXPERIMENTS else e
                                        for e in EXPERIMENTS])
def test_experiment_runs_one_step_and_learns(tmp_path, experiment):
    # each experiment's own RL base, shipped with the package (src/bugfix_rl/bases/), in an empty cache
    # that must stay empty; the entropy bonus gives the RL step a gradient should every group tie
    tools = ["eval.heldout_n=1", "eval.shapes_n=1", "eval.test=false", "algo.entropy_coef=0.01",
             "algo.group_size=2", "algo.prompts_per_step=2"]
    # tools_generated's shapes evaluation (the same path as tools') waits on ~100 serial sandbox gradings, and
    # its validation on shapes_val too (55 tasks: eval.val_splits, tests/test_eval_report.py)
    extra = {"ablation": ["eval.heldout_n=2"], "tools": tools,
             "tools_generated": tools + ["eval.shapes_n=0", "eval.val_splits=[val]"],
             "capstone_generated": ["eval.shapes_n=1", "algo.entropy_coef=0.01"]}.get(experiment, [])
    run = _one_step(tmp_path, f"+exp={experiment}", f"policy.cache_dir={tmp_path / 'cache'}", *extra)
    assert (run / "eval.json").is_file() and _changed(run)
    assert not list((tmp_path / "cache").glob("*.safetensors")), "a base was built: run `make bases`"


# async starts two sandboxed rollout processes (~30-50 s); the staleness experiment covers the same
# bounded-staleness path in process, so this arm runs with `make test-slow`
SLOW_ARMS = {"async"}


@pytest.mark.parametrize("arm", [pytest.param(a, marks=pytest.mark.slow) if a in SLOW_ARMS else a for a in ARMS])
def test_ablation_arm_runs_one_step_and_learns(tmp_path, arm):
    run = _one_step(tmp_path, "+exp=ablation", f"+ablation={arm}", "eval.heldout_n=2")
    assert _changed(run)
