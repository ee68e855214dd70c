"""Sweeps on a cluster: Hydra's submitit launcher, run here with its local executor, writes runs where
`bugfix-rl report` finds them; the SLURM launcher config composes and resolves without a cluster."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bugfix_rl import cli
from bugfix_rl.evaluate.ablation import build_report


def test_launcher_overrides_pass_the_cli_check():
    """Keys under hydra (hydra/launcher=..., hydra.launcher.*) are Hydra's to check, not the schema's."""
    cli.check_overrides("train", ["+exp=smoke", "seed=0,1,2", "hydra/launcher=submitit_local",
                                  "hydra.launcher.timeout_min=5", "hydra.sweep.dir=/tmp/x", "-m"])


def _launcher(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import instantiate

    from bugfix_rl.config import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(cli.CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        return instantiate(cfg.hydra.launcher)


def test_slurm_launcher_config_replaces_the_ablation_launcher():
    launcher = _launcher(["exp=ablation", "threads=3", "hydra/launcher=slurm_cpu"])
    assert type(launcher).__name__ == "SlurmLauncher"
    assert launcher.params["cpus_per_task"] == 3 and launcher.params["timeout_min"] == 120
    assert type(_launcher(["exp=ablation"])).__name__ == "JoblibLauncher"
    assert _launcher(["exp=ablation"]).joblib["n_jobs"] == 2


@pytest.mark.slow  # ~30 s: three submitit jobs; the joblib launcher's sweep is read by report in test_eval_report
def test_submitit_local_multirun_of_three_seeds_is_read_by_report(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    command = [sys.executable, "-m", "bugfix_rl.cli", "train", "+exp=smoke", "seed=0,1,2", "threads=1",
               "hydra/launcher=submitit_local", f"hydra.sweep.dir={sweep}", "-m"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = sorted(p.parent.name for p in sweep.rglob("eval.json"))
    assert runs == ["default_seed0_0", "default_seed1_1", "default_seed2_2"]  # the -m layout report reads
    assert len(list((sweep / ".submitit").rglob("*_result.pkl"))) == 3  # each run was a submitit job
    seeds = sorted(json.loads((sweep / r / "eval.json").read_text())["config"]["seed"] for r in runs)
    assert seeds == [0, 1, 2]

    report = build_report(sweep, "default")
    assert [row.arm for row in report.rows] == ["default"] and report.rows[0].seeds == [0, 1, 2]
    cli.main(["report", f"dir={sweep}", "reference=default"])  # one arm: the table, no comparison
    out = capsys.readouterr().out
    written = (sweep / "report.md").read_text()  # the console table wraps with the terminal's width
    assert "| 0 1 2 |" in written and "needs a second arm" in written and "report.md" in out
    assert "only the reference arm: no comparison" in (sweep / "report.md").read_text()
