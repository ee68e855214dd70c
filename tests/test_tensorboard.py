"""TensorBoard beside W&B (issue 38): `logger=tensorboard` writes the dashboard rows and the final
evaluation to <run dir>/tensorboard/, read back here with TensorBoard's own EventAccumulator; without the
`tensorboard` package the run is refused in one line before any folder is made."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from bugfix_rl import cli

SMALL = ["+exp=smoke", "steps=2", "threads=1", "eval.n_val=2", "eval.n_test=2", "logger.console=false",
         "preflight=false"]


@pytest.fixture(scope="module")
def tensorboard_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("tb") / "run"
    torch.set_num_threads(1)
    cli.main(["train", *SMALL, "logger=tensorboard", "logger.console=false", f"hydra.run.dir={run_dir}"])
    return run_dir


def _scalars(run_dir: Path) -> dict[str, list]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: events.Scalars(tag) for tag in events.Tags()["scalars"]}


def test_tensorboard_holds_the_dashboard_rows_at_their_steps(tensorboard_run):
    scalars = _scalars(tensorboard_run)
    rows = [json.loads(line) for line in (tensorboard_run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1]
    for key in ("reward", "entropy", "approx_kl", "grad_norm", "zero_adv_frac"):
        assert [e.step for e in scalars[key]] == [0, 1], key
        assert [e.value for e in scalars[key]] == pytest.approx([row[key] for row in rows], rel=1e-6), key


def test_tensorboard_holds_the_final_evaluation(tensorboard_run):
    scalars = _scalars(tensorboard_run)
    result = json.loads((tensorboard_run / "eval.json").read_text())
    for name in ("base", "chosen"):
        [point] = scalars[f"test/{name}/pass_at_1"]
        assert point.step == 1 and point.value == pytest.approx(result["test"][name]["pass_at_1"])
        assert [scalars[f"test/{name}/ci_{end}"][0].value for end in ("low", "high")] == pytest.approx(
            result["test"][name]["ci"])
    assert scalars["test/paired_diff"][0].value == pytest.approx(result["test"]["paired_diff"]["diff"])
    assert scalars["chosen_step"][0].value == result["chosen_step"]
    validation = {int(step): v for step, v in result["validation"].items()}  # each checkpoint at its step
    assert [e.step for e in scalars["validation/pass_at_1"]] == sorted(validation) == [0, 1, 2]
    assert [e.value for e in scalars["validation/pass_at_1"]] == pytest.approx(
        [validation[s]["pass_at_1"] for s in sorted(validation)])
    assert [e.value for e in scalars["validation/ci_high"]] == pytest.approx(
        [validation[s]["ci"][1] for s in sorted(validation)])


def test_tensorboard_is_off_by_default():
    from bugfix_rl.config import TrainConfig

    assert TrainConfig().logger.tensorboard is False


def test_without_the_tensorboard_package_a_run_is_one_line_and_no_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed: its import fails
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", *SMALL, "logger.tensorboard=true", f"hydra.run.dir={run_dir}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: logger.tensorboard=true needs the tensorboard package") and "\n" not in err, err
    assert not run_dir.exists()
