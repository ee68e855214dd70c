"""The copy-switch ablation arms (conf/ablation/copy_*_off.yaml, scripts/copy_switches.sh): each turns
off exactly its switch of the tools recipe, and the composed config passes validation."""

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


def _policy(*overrides: str) -> dict:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = OmegaConf.to_object(compose("train", overrides=["exp=tools_generated", *overrides]))
    validate(cfg)
    return {name: value for name, value in asdict(cfg.policy).items() if name in SWITCHES} | {"arm": cfg.arm}


def test_every_switch_has_an_arm():
    assert sorted(p.stem for p in (CONF / "ablation").glob("copy_*_off.yaml")) == sorted(f"{s}_off" for s in SWITCHES)


@pytest.mark.parametrize("switch", SWITCHES)
def test_an_arm_turns_off_its_switch_and_nothing_else(switch):
    recipe, arm = _policy(), _policy(f"ablation={switch}_off")
    assert all(recipe[name] for name in SWITCHES), "the recipe has every switch on"
    off = {switch, *READERS.get(switch, ())}
    assert {name for name in SWITCHES if arm[name] != recipe[name]} == off
    assert all(not arm[name] for name in off) and arm["arm"] == f"{switch}_off"
