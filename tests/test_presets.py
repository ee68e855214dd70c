"""Every preset in conf/algo/: composes, passes the ten preflight invariants on a first batch of the RL
base, and trains two smoke steps through the CLI with its parameters changed (SPEC §4, issue 3).

The two-step runs share one `bugfix-rl train +exp=smoke algo=a,b,... -m` process, so the imports and
the RL base load are paid once; their own preflight is off there (the test above runs it) and they
checkpoint at steps 0 and 2 only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from in_process import cli_result
from omegaconf import OmegaConf

from bugfix_rl.algo.advantages import ADVANTAGES
from bugfix_rl.checkpoint import load_checkpoint
from bugfix_rl.config import register_configs, validate
from bugfix_rl.run.preflight import BOUNDS, check_batch, first_batch, make_first_task, preflight_trainer

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PRESETS = sorted(p.stem for p in (CONF / "algo").glob("*.yaml"))
REQUIRED = {"grpo", "dr_grpo", "rloo", "dapo", "gspo"}


def composed(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = OmegaConf.to_object(compose("train", overrides=list(overrides)))
    validate(cfg)
    return cfg


def test_required_presets_exist():
    assert REQUIRED <= set(PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_composes_with_its_name_and_command(preset):
    text = (CONF / "algo" / f"{preset}.yaml").read_text()
    assert text.startswith("#") and f"bugfix-rl train algo={preset}" in text  # opens with paper + command
    assert composed(f"algo={preset}").algo.name == preset


# ------------------------------------------------------------------------------------------------
# Preflight on a first batch of the RL base (2 tasks x 8 episodes, sampled once).


@pytest.fixture(scope="module")
def base_batch():
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.recipes.starting_policy import build_starting_policy

    torch.set_num_threads(1)  # the tiny model gains nothing from a second thread on a shared machine
    cfg = composed()
    cfg.algo.prompts_per_step = 2
    tokenizer = build_tokenizer_for(cfg)
    model = build_starting_policy(cfg.policy, tokenizer)
    make_env, close = make_env_factory(cfg.env)
    trajectories, batch = first_batch(preflight_trainer(cfg, model, tokenizer, make_env), seed=0)
    max_action_tokens = make_env(make_first_task(), None).max_action_tokens
    close()
    return model, tokenizer, trajectories, batch, max_action_tokens


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_passes_preflight(base_batch, preset):
    model, tokenizer, trajectories, batch, max_action_tokens = base_batch
    algo = composed(f"algo={preset}").algo
    algo.prompts_per_step = 2
    grouped = batch.rewards.view(-1, algo.group_size)
    batch.advantages = ADVANTAGES[algo.adv_mode](grouped, algo.adv_eps).reshape(-1)  # the preset's estimator
    checks = check_batch(model, trajectories, batch, algo, tokenizer, max_action_tokens)
    assert set(checks) == set(BOUNDS)
    failed = {name: check for name, check in checks.items() if not check["ok"]}
    assert not failed, f"{preset}: {failed}"


# ------------------------------------------------------------------------------------------------
# Two smoke steps per preset through the CLI.


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory) -> dict[str, Path]:
    sweep_dir = tmp_path_factory.mktemp("presets")
    result = cli_result("train", "+exp=smoke", f"algo={','.join(PRESETS)}", "eval.test=false", "eval.ckpt_every=2",
                        "preflight=false", "threads=1",  # 1 thread: no spin-waiting
                        f"hydra.sweep.dir={sweep_dir}", "-m", cwd=ROOT)  # in this process (tests/in_process.py)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = {}
    for eval_file in sweep_dir.glob("*/eval.json"):
        name = json.loads(eval_file.read_text())["config"]["resolved"]["algo"]["name"]
        runs[name] = eval_file.parent
    return runs


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_trains_two_steps_and_changes_parameters(smoke_runs, preset):
    run = smoke_runs[preset]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1]
    assert all(torch.isfinite(torch.tensor(row["grad_norm"])) for row in rows)
    before, meta_before = load_checkpoint(run / "checkpoints" / "step_000.safetensors")
    after, meta_after = load_checkpoint(run / "checkpoints" / "step_002.safetensors")
    assert (meta_before["step"], meta_after["step"]) == (0, 2)
    assert meta_after["config"]["algo"]["name"] == preset
    weights = sorted(name for name in before if name.startswith("model."))
    assert weights and weights == sorted(name for name in after if name.startswith("model."))
    changed = [name for name in weights if not torch.equal(before[name], after[name])]
    assert changed, f"{preset}: no parameter changed in two steps"
    assert all(torch.isfinite(after[name]).all() for name in weights)
