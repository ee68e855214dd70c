"""The copy-switch ablation arms (conf/ablation/copy_*_off.yaml, scripts/copy_switches.sh): each turns
off exactly its switch of the tools recipe (+exp=tools), and the composed config passes validation; and
+exp=tools_generated, after the ablation's verdict, keeps the copy head with every switch off."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from bugfix_rl.config import register_configs, validate

CONF = Path(__file__).resolve().parents[1] / "conf"
SWITCHES = ("copy_softcap", "copy_suffix_match", "copy_edit_resume", "copy_resume_cut", "copy_resume_next")
READERS = {"copy_edit_resume": ("copy_resume_cut", "copy_resume_next")}  # switches that read its pointer


def _policy(*overrides: str, experiment: str = "tools") -> dict:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = OmegaConf.to_object(compose("train", overrides=[f"exp={experiment}", *overrides]))
    validate(cfg)
    return {name: value for name, value in asdict(cfg.policy).items() if name in (*SWITCHES, "copy_head")} | {
        "arm": cfg.arm}


def test_every_switch_has_an_arm():
    assert sorted(p.stem for p in (CONF / "ablation").glob("copy_*_off.yaml")) == sorted(f"{s}_off" for s in SWITCHES)


@pytest.mark.parametrize("switch", SWITCHES)
def test_an_arm_turns_off_its_switch_and_nothing_else(switch):
    recipe, arm = _policy(), _policy(f"ablation={switch}_off")
    assert all(recipe[name] for name in SWITCHES), "the recipe has every switch on"
    off = {switch, *READERS.get(switch, ())}
    assert {name for name in SWITCHES if arm[name] != recipe[name]} == off
    assert all(not arm[name] for name in off) and arm["arm"] == f"{switch}_off"


def test_the_generated_task_recipe_keeps_the_copy_head_without_its_switches():
    policy = _policy(experiment="tools_generated")
    assert policy["copy_head"] and not any(policy[name] for name in SWITCHES)
