"""`bugfix-rl eval` and `bugfix-rl report` end to end on real tiny runs, their one-line errors, the
offline wandb rows, and the PNGs the runs and reports reference.

Two sets of real runs are made once per module, in-process through the CLI (as a user would type it):
one `+exp=smoke` run with logger=wandb (offline), and a 2-arm x 2-seed `-m` sweep of one-step runs
evaluated on the held-out and the `shapes` tasks. `arm` is a free label, so both arms of the sweep are the same recipe.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from in_process import run_cli_in_process

from bugfix_rl.evaluate.ablation import ReportError, build_report
from bugfix_rl.evaluate.checkpoint_eval import run_eval
from bugfix_rl.evaluate.evaluate import success_counts
from bugfix_rl.evaluate.intervals import arm_difference
from bugfix_rl.evaluate.power import minimum_detectable_effect, required_units_t
from bugfix_rl.evaluate.stats import required_units
from bugfix_rl.present.ablation_report import shapes_table
from bugfix_rl.types import Trajectory

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
COMMON = ["threads=1"]  # the machine is shared: one thread avoids oversubscription stalls


def run_cli(argv: list[str]) -> None:
    run_cli_in_process(*argv)  # in this process, which keeps its state (tests/in_process.py)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    """A `bugfix-rl train +exp=smoke logger=wandb` run (2 steps, checkpoints 0-2), wandb offline."""
    run_dir = tmp_path_factory.mktemp("smoke")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_DIR", str(run_dir))
        patch.setenv("WANDB_SILENT", "true")
        run_cli(["train", "+exp=smoke", "logger=wandb", "logger.console=false", "eval.shapes_val_n=1", *COMMON,
                 f"hydra.run.dir={run_dir}"])
    return run_dir


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """`bugfix-rl train +exp=smoke arm=a,b seed=0,1 ... -m`: four one-step runs scored on the held-out tasks,
    and evaluated on the 50 `shapes` tasks too."""
    sweep_dir = tmp_path_factory.mktemp("sweep")
    run_cli(["train", "+exp=smoke", "arm=a,b", "seed=0,1", "steps=1", "preflight=false", "eval.test=false",
             "eval.n_val=1", "eval.heldout_n=2", "eval.shapes_n=1", *COMMON, f"hydra.sweep.dir={sweep_dir}", "-m"])
    return sweep_dir


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")  # rich wraps tables to the terminal (80 columns when captured)


def one_line_error(capsys, argv: list[str]) -> str:
    """Run the CLI expecting exit code 2 and exactly one line on stderr; return that line."""
    with pytest.raises(SystemExit) as exit_info:
        run_cli(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


# ----------------------------------------------------------------------------------------------
# eval


def test_eval_end_to_end_with_compare(smoke_run, tmp_path, capsys):
    ckpts = smoke_run / "checkpoints"
    out = tmp_path / "eval.json"
    run_cli(["eval", f"ckpt={ckpts / 'step_002.safetensors'}", f"compare={ckpts / 'step_000.safetensors'}",
             "split=val", "n=4", *COMMON, f"out={out}"])
    printed = capsys.readouterr().out
    for expected in ("5 tasks x 4 episodes per task, eval seed 4", "pass@1", "pass@4", "first edits",
                     "behaviour", "most common action sequences", "paired difference in pass@1, A - B",
                     "same 20 episodes, paired", "McNemar exact p ="):
        assert expected in printed, expected
    result = json.loads(out.read_text())
    assert [m["step"] for m in result["models"]] == [2, 0]
    for model in result["models"]:
        assert set(model["pass_at_k"]) == {"1", "4"}  # pass@8 needs n >= 8
        lo, hi = model["pass_at_k"]["1"]["ci"]
        assert lo <= model["pass_at_k"]["1"]["value"] <= hi
        assert len(model["per_task"]) == 5 and all(0 <= c <= 4 for c in model["per_task"])
        assert sum(count for count, _ in model["sequences"]) <= 20
        assert len(model["pass_at_k_curve"]) == 4 and len(model["outcomes"]) == 20
        assert [sum(model["outcomes"][4 * i:4 * i + 4]) for i in range(5)] == model["per_task"]
        assert {row["task"] for row in model["per_task_table"]} == set(result["tasks"])
    diff = result["paired_diff"]
    rates = [torch.tensor(m["per_task"], dtype=torch.float64) / 4 for m in result["models"]]
    assert diff["diff"] == pytest.approx(float((rates[0] - rates[1]).mean()))
    assert "over_templates" not in diff and "templates" not in printed  # the book's tasks: one per name
    # generated tasks (names '<template>-<hash>', several per template): the same comparison over templates too
    from rich.console import Console

    from bugfix_rl.evaluate.checkpoint_eval import paired_difference
    from bugfix_rl.present.tables import print_eval

    names = ["minmax/a-1", "minmax/a-2", "zero/b-1", "zero/b-2", "init/c-1"]
    generated = dict(result, paired_diff=paired_difference(*result["models"], 4, names))
    units = [torch.stack([r[:2].mean(), r[2:4].mean(), r[4]]) for r in rates]  # each template's tasks averaged
    over = generated["paired_diff"]["over_templates"]
    assert over["templates"] == 3 and over["diff"] == pytest.approx(float((units[0] - units[1]).mean()))
    console = Console(record=True, width=250)
    print_eval(generated, console)
    assert (f"the same over the 3 templates (each one's tasks averaged into one unit; for new shapes, read this"
            f" one): {over['diff']:+.3f} [{over['ci'][0]:+.3f}, {over['ci'][1]:+.3f}]") in console.export_text()


def test_eval_same_checkpoint_twice_sees_the_same_stream(smoke_run):
    ckpt = str(smoke_run / "checkpoints" / "step_001.safetensors")
    torch.set_num_threads(1)
    result = run_eval(ckpt, "test", n=2, seed=7, compare=ckpt)
    first, second = result["models"]
    assert first["per_task"] == second["per_task"] and first["sequences"] == second["sequences"]
    assert result["paired_diff"]["diff"] == 0.0 and result["paired_diff"]["per_task"] == [0.0] * 5
    lo, hi = result["paired_diff"]["ci"]
    assert lo <= 0.0 <= hi  # about new tasks: agreeing on these 5 does not pin the difference to 0 there
    episodes = result["paired_diff"]["episodes"]
    assert (episodes["a_only"], episodes["b_only"], episodes["p_exact"], episodes["se"]) == (0, 0, 1.0, 0.0)


def test_eval_on_the_shapes_split(smoke_run, tmp_path, capsys):
    from bugfix_rl.gym.tasks import make_tasks

    out = tmp_path / "shapes.json"
    run_cli(["eval", f"ckpt={smoke_run / 'checkpoints' / 'step_002.safetensors'}", "split=shapes", "n=1", *COMMON,
             f"out={out}"])
    assert "split shapes: 50 tasks x 1 episodes per task" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["tasks"] == [t.name for t in make_tasks("shapes")] and len(result["models"][0]["per_task"]) == 50


def test_eval_missing_checkpoint_is_one_line_exit_2_from_the_console_script(tmp_path):
    script = Path(sys.executable).with_name("bugfix-rl")
    done = subprocess.run([str(script), "eval", f"ckpt={tmp_path / 'missing.safetensors'}"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: checkpoint not found: {tmp_path / 'missing.safetensors'}"


def test_eval_corrupt_checkpoints_are_one_line_exit_2(smoke_run, tmp_path, capsys):
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a checkpoint at all")
    assert "cannot read checkpoint" in one_line_error(capsys, ["eval", f"ckpt={garbage}"])
    real = (smoke_run / "checkpoints" / "step_000.safetensors").read_bytes()
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(real[: len(real) // 2])
    assert "cannot read checkpoint" in one_line_error(capsys, ["eval", f"ckpt={truncated}"])
    good = smoke_run / "checkpoints" / "step_000.safetensors"  # a bad compare= fails before any sampling
    assert "not found" in one_line_error(capsys, ["eval", f"ckpt={good}", f"compare={tmp_path / 'nope'}"])


def test_eval_bad_input_is_one_line_exit_2(smoke_run, capsys):
    ckpt = smoke_run / "checkpoints" / "step_000.safetensors"
    assert "valid values: train, val, test, heldout, shapes" in one_line_error(capsys,
                                                                               ["eval", f"ckpt={ckpt}", "split=dev"])
    assert "ckpt" in one_line_error(capsys, ["eval"])


# ----------------------------------------------------------------------------------------------
# report


def test_report_end_to_end_on_a_multirun_sweep(sweep, capsys):
    runs = sorted(p.parent.name for p in sweep.rglob("eval.json"))
    assert runs == ["a_seed0_0", "a_seed1_1", "b_seed0_2", "b_seed1_3"]  # Hydra's -m layout
    run_cli(["report", f"dir={sweep}", "reference=a"])
    printed = capsys.readouterr().out
    assert "held-out pass@1 by seed" in printed and "reference" in printed
    assert "seeds per arm" in printed and "paired tasks" in printed  # the power calculation
    report_md = (sweep / "report.md").read_text()
    assert "![forest plot](forest_plot.png)" in report_md
    assert (sweep / "forest_plot.png").read_bytes().startswith(PNG_MAGIC)
    main_md = report_md.split("## Shapes", 1)[0]  # the held-out table; the shapes one follows
    table = [line for line in main_md.splitlines() if line.startswith("| a ") or line.startswith("| b ")]
    assert len(table) == 2 and "| reference |" in table[0]
    # both arms are the same recipe with the same seeds: identical runs, a difference of exactly zero,
    # with an interval as wide as the seed-to-seed spread says (symmetric: the t-interval)
    cell = table[1].split(" | ")[4]
    assert cell.startswith("+0.000 [-") and cell.split("[-")[1].split(",")[0] == cell.split(", +")[1].rstrip("]")
    for name in runs:
        assert f"`{name}`" in report_md
    page = (sweep / "report.html").read_text()  # the same table as a page, linking each run's own page
    for name in runs:
        assert f"href='./{name}/viewer.html'" in page and (sweep / name / "viewer.html").is_file()
    assert "held-out, RL base" in (sweep / runs[0] / "viewer.html").read_text()  # eval.test=false: held-out episodes
    # the shapes tasks: their own table beside the held-out one, the same seed-aware interval (zero here)
    assert "shapes pass@1 by seed" in printed and "Shapes: pass@1 on 50 `shapes` tasks" in printed
    shapes_md = report_md.split("## Shapes", 1)[1].split("## Power", 1)[0]
    shapes_rows = [line for line in shapes_md.splitlines() if line.startswith("| a ") or line.startswith("| b ")]
    assert len(shapes_rows) == 2 and "| reference |" in shapes_rows[0]
    assert shapes_rows[1].split(" | ")[4].startswith("+0.000 [-")
    assert "id='shapes'" in page


def test_a_run_with_shapes_n_writes_the_shapes_evaluation_everywhere(sweep):
    run = sweep / "a_seed0_0"
    result = json.loads((run / "eval.json").read_text())
    for key in ("shapes", "shapes_base", "heldout"):
        assert result[key]["tasks"] == (50 if key.startswith("shapes") else 10) and result[key]["n"] in (1, 2)
    diff = result["shapes_paired_diff"]
    assert diff["tasks"] == 50 and diff["ci"][0] <= diff["diff"] <= diff["ci"][1]
    kept = result["shapes_gain_kept"]
    assert kept["shapes"] == [diff["diff"], *diff["ci"]]
    heldout_gain = result["heldout_paired_diff"]["diff"]
    assert kept["share"] == (pytest.approx(diff["diff"] / heldout_gain) if heldout_gain > 0 else None)
    for name in ("shapes_base.txt", "shapes_chosen.txt"):  # one decoded episode per task
        headers = [line for line in (run / "transcripts" / name).read_text().splitlines() if line.startswith("## ")]
        assert [line.split()[1] for line in headers] == result["shapes"]["tasks_names"]
    summary = (run / "summary.md").read_text()
    assert "## Shapes" in summary and "(50 tasks x 1 episodes, seed 0)" in summary
    assert "shapes gain / held-out gain:" in summary and "paired over 50 shapes tasks" in summary
    over = diff["over_templates"]  # the 50 tasks come from 15 templates: the gain over them too
    assert over["templates"] == 15 and over["ci"][0] <= over["diff"] <= over["ci"][1]
    assert "paired over the 15 shapes templates (each one's tasks averaged)" in summary
    page = (run / "viewer.html").read_text()
    assert "<h2>Held-out</h2>" in page and "<h2>Shapes</h2>" in page and "all 50 shapes tasks x 1" in page
    assert "paired over the 15 shapes templates" in page
    assert "over_templates" not in result["heldout_paired_diff"]  # the book's tasks: one each
    from bugfix_rl.present.wandb_run import final_metrics

    metrics = final_metrics(result)  # W&B's summary keys
    assert metrics["shapes/paired_diff_over_templates"] == over["diff"]
    ci = [metrics[f"shapes/paired_diff_over_templates_ci_{end}"] for end in ("low", "high")]
    assert ci == over["ci"]
    assert "heldout/paired_diff_over_templates" not in metrics


def test_a_run_with_shapes_val_n_evaluates_the_validation_shapes(smoke_run):
    """eval.shapes_val_n: the start and the chosen checkpoint on the 50 `shapes_val` tasks, in eval.json and
    summary.md, so that a full run can be read where recipes for new shapes are chosen."""
    from bugfix_rl.gym.tasks import make_tasks

    result = json.loads((smoke_run / "eval.json").read_text())
    assert "shapes" not in result  # eval.shapes_n is 0 there: one split does not bring the other
    for key in ("shapes_val", "shapes_val_base"):
        assert result[key]["tasks"] == 50 and result[key]["n"] == 1
    assert result["shapes_val"]["tasks_names"] == [t.name for t in make_tasks("shapes_val")]
    diff = result["shapes_val_paired_diff"]
    assert diff["tasks"] == 50 and diff["ci"][0] <= diff["diff"] <= diff["ci"][1]
    summary = (smoke_run / "summary.md").read_text()
    assert "## shapes_val" in summary and "paired over 50 shapes_val tasks" in summary
    assert diff["over_templates"]["templates"] == 15 and "paired over the 15 shapes_val templates" in summary


def test_a_checkpoint_chosen_on_val_and_shapes_val_pools_their_tasks(tmp_path, capsys):
    """eval.val_splits=[val,shapes_val]: each kept checkpoint is validated on the book's 5 tasks and the 50
    shapes_val tasks pooled (the chosen step is the best pooled pass@1), and the run's pages say so; a split
    that is read once at the end cannot be chosen on."""
    from bugfix_rl.gym.tasks import make_tasks

    run_cli(["train", "+exp=smoke", "steps=1", "preflight=false", "eval.test=false", "eval.n_val=1",
             "eval.val_splits=[val,shapes_val]", *COMMON, f"hydra.run.dir={tmp_path}"])
    result = json.loads((tmp_path / "eval.json").read_text())
    names = [t.name for t in make_tasks("val") + make_tasks("shapes_val")]
    for summary in result["validation"].values():
        assert summary["tasks"] == 55 and summary["tasks_names"] == names and summary["n"] == 1
        by_split = summary["by_split"]  # each split's own rate: the pooled one is their task-weighted mean
        assert [(s, r["tasks"]) for s, r in by_split.items()] == [("val", 5), ("shapes_val", 50)]
        pooled = (5 * by_split["val"]["pass_at_1"] + 50 * by_split["shapes_val"]["pass_at_1"]) / 55
        assert pooled == pytest.approx(summary["pass_at_1"])
        assert all(r["ci"][0] <= r["pass_at_1"] <= r["ci"][1] for r in by_split.values())
    best = max(v["pass_at_1"] for v in result["validation"].values())
    assert result["validation"][str(result["chosen_step"])]["pass_at_1"] == best
    summary_md = (tmp_path / "summary.md").read_text()
    rate = result["validation"]["0"]["by_split"]["shapes_val"]
    shapes_val_text = f"; shapes_val {rate['pass_at_1']:.3f} [{rate['ci'][0]:.3f}, {rate['ci'][1]:.3f}] on 50 tasks"
    assert "best validation pass@1 on val + shapes_val" in summary_md and shapes_val_text in summary_md
    page = (tmp_path / "viewer.html").read_text()
    assert "checkpoint selection, on val + shapes_val" in page and shapes_val_text in page
    capsys.readouterr()
    err = one_line_error(capsys, ["train", "+exp=smoke", "eval.val_splits=[val,shapes]", f"hydra.run.dir={tmp_path}/x"])
    assert "eval.val_splits=[val,shapes]" in err and "read once" in err and not (tmp_path / "x").exists()
    err = one_line_error(capsys, ["train", "+exp=smoke", "eval.val_splits=[shapes_val]", "eval.shapes_val_n=1",
                                  f"hydra.run.dir={tmp_path}/x"])
    assert "eval.shapes_val_n must be 0" in err and not (tmp_path / "x").exists()
    err = one_line_error(capsys, ["train", "+exp=smoke", "steps=2", f"resume={tmp_path}", f"hydra.run.dir={tmp_path}/x"])
    assert "validated on eval.val_splits=[val,shapes_val]" in err and not (tmp_path / "x").exists()


def test_report_without_runs_is_one_line_exit_2(tmp_path, capsys):
    assert "no runs under" in one_line_error(capsys, ["report", f"dir={tmp_path}"])
    missing = tmp_path / "typo"
    assert "no runs" in one_line_error(capsys, ["report", f"dir={missing}"])
    assert not missing.exists()  # a mistyped dir is reported, not created


def test_report_unknown_reference_names_the_arms(sweep, capsys):
    err = one_line_error(capsys, ["report", f"dir={sweep}", "reference=default"])
    assert "reference arm 'default'" in err and "a, b" in err


def test_report_without_a_default_arm_compares_with_the_first_arm(sweep):
    """reference not given and no arm named `default` (a sweep over a plain key): the first arm by name."""
    assert build_report(sweep, "").reference == "a"


def _fake_run(root: Path, arm: str, seed: int, per_task: list[int], n: int, heldout: bool,
              shapes: list[int] | None = None, shapes_val: list[int] | None = None,
              shapes_val_names: list[str] | None = None) -> None:
    score = {"per_task": per_task, "n": n, "tasks_names": [f"t{i}" for i in range(len(per_task))]}
    result = {"config": {"arm": arm, "seed": seed},
              "train": {"late_reward": 0.5 + seed, "late_exploit": 0.0, "final_entropy": 0.2, "sampled_episodes": 64}}
    if heldout:
        result["heldout"] = score
    if shapes is not None:
        result["shapes"] = {"per_task": shapes, "n": n, "tasks_names": [f"s{i}" for i in range(len(shapes))]}
    if shapes_val is not None:
        result["shapes_val"] = {"per_task": shapes_val, "n": n,
                                "tasks_names": shapes_val_names or [f"v{i}" for i in range(len(shapes_val))]}
    result["test"] = {"chosen": score, "base": score}
    path = root / f"{arm}_seed{seed}" / "eval.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(result))


@pytest.mark.parametrize("heldout", [True, False])
def test_report_numbers_by_hand(tmp_path, heldout):
    counts = {("default", 0): [4, 2, 0, 1], ("default", 1): [3, 2, 1, 1], ("default", 2): [4, 1, 0, 2],
              ("kl", 0): [4, 3, 1, 1], ("kl", 1): [4, 2, 2, 1]}
    for (arm, seed), per_task in counts.items():
        _fake_run(tmp_path, arm, seed, per_task, 4, heldout)
    report = build_report(tmp_path, "default")
    assert report.source == ("heldout" if heldout else "test")
    default, kl = report.rows
    assert default.per_seed == pytest.approx([7 / 16, 7 / 16, 7 / 16]) and kl.per_seed == pytest.approx([9 / 16, 9 / 16])
    rates = {arm: torch.tensor([counts[arm, s] for s in seeds], dtype=torch.float64) / 4
             for arm, seeds in (("default", (0, 1, 2)), ("kl", (0, 1)))}
    per_task_diff = rates["kl"].mean(0) - rates["default"].mean(0)  # tasks averaged over seeds, then paired
    assert kl.diff[0] == pytest.approx(float(per_task_diff.mean()))
    by_hand = arm_difference(rates["kl"], rates["default"])
    assert kl.diff == pytest.approx((float(by_hand.diff), float(by_hand.lo), float(by_hand.hi)))
    assert kl.mde == pytest.approx(minimum_detectable_effect(float(by_hand.se), float(by_hand.df)))
    assert kl.train["late_reward"] == pytest.approx(1.0)  # (0.5 + 1.5) / 2
    power = report.power
    assert power["seed_sd"] == 0.0  # every arm's seeds agree exactly here: no spread, no seed count claimed
    assert all(row["seeds_per_arm"] is None for row in power["table"])
    assert power["task_diff_sd"] == pytest.approx(float(per_task_diff.std()))
    assert [row["paired_tasks"] for row in power["table"]] == [
        required_units_t(power["task_diff_sd"], e, two_arms=False) for e in (0.10, 0.05, 0.02)]
    assert [row["paired_tasks_z"] for row in power["table"]] == [required_units(power["task_diff_sd"], e)
                                                                 for e in (0.10, 0.05, 0.02)]


def test_report_leaves_out_and_names_an_interrupted_run(tmp_path):
    _fake_run(tmp_path, "default", 0, [4, 2], 4, heldout=True)
    stopped = tmp_path / "default_seed1"
    stopped.mkdir()
    (stopped / "status.json").write_text(json.dumps({"status": "interrupted", "step": 7,
                                                     "last_checkpoint": "ckpt/step_005.safetensors"}))
    (tmp_path / "default_seed0" / "status.json").write_text(json.dumps({"status": "complete", "step": 40}))
    report = build_report(tmp_path, "default")
    assert [run.seed for run in report.runs] == [0]
    assert report.notes == [f"left out {stopped}: interrupted after 7 steps (resume from ckpt/step_005.safetensors)"]


def test_report_power_from_seed_spread(tmp_path):
    for seed, per_task in enumerate([[4, 0], [2, 0], [3, 1]]):
        _fake_run(tmp_path, "default", seed, per_task, 4, heldout=True)
    report = build_report(tmp_path, "default")
    seed_sd = float(torch.tensor([0.5, 0.25, 0.5], dtype=torch.float64).std())
    assert report.power["seed_sd"] == pytest.approx(seed_sd)
    assert report.power["table"][0]["seeds_per_arm"] == required_units_t(seed_sd, 0.10, two_arms=True)
    assert report.power["table"][0]["seeds_per_arm_z"] == required_units(math.sqrt(2) * seed_sd, 0.10)


# ----------------------------------------------------------------------------------------------
# the run's artifacts: wandb rows, dashboard and forest plot referenced from the markdown


def wandb_history(path: str) -> list[dict]:
    """History rows of an offline wandb run file."""
    from tests.wandb_records import items, wandb_records

    return [{key: json.loads(value) for key, value in items(record.history.item).items()}
            for record in wandb_records(path) if record.WhichOneof("record_type") == "history"]


def test_wandb_offline_logs_the_dashboard_rows(smoke_run):
    files = glob.glob(str(smoke_run / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1, os.listdir(smoke_run)
    logged = wandb_history(files[0])
    rows = [json.loads(line) for line in (smoke_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["_step"] for r in logged] == [r["step"] for r in rows] == [0, 1]
    for sent, row in zip(logged, rows):
        for key in ("reward", "entropy", "approx_kl", "clip_frac", "grad_norm", "logp_gap", "zero_adv_frac"):
            assert sent[key] == pytest.approx(row[key]), key


def test_wandb_offline_run_holds_the_final_evaluation_and_an_episodes_table(smoke_run):
    """issue 38: the W&B run was closed before the final evaluation (no test metric reached it) and had a
    random name, no group, no tags. Read back from the offline run's own files."""
    from tests.wandb_records import items, wandb_records

    [path] = glob.glob(str(smoke_run / "wandb" / "offline-run-*" / "run-*.wandb"))
    records = wandb_records(path)
    [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.display_name, run.run_group) == ("smoke-default-seed0", "smoke")
    assert {"arm=default", "seed=0", "env=edit_menu", "algo=grpo"} <= set(run.tags)
    summary = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            summary.update({key: json.loads(value) for key, value in items(record.summary.update).items()})
    test = json.loads((smoke_run / "eval.json").read_text())["test"]
    for name in ("base", "chosen"):
        assert summary[f"test/{name}/pass_at_1"] == pytest.approx(test[name]["pass_at_1"])
        assert [summary[f"test/{name}/ci_low"], summary[f"test/{name}/ci_high"]] == pytest.approx(test[name]["ci"])
    assert summary["test/paired_diff"] == pytest.approx(test["paired_diff"]["diff"])
    table = json.loads((Path(path).parent / "files" / summary["episodes/path"]).read_text())
    assert table["columns"] == ["evaluation", "task", "success", "reward", "advantage", "transcript"]
    assert summary["episodes/nrows"] == len(table["data"]) > 0
    assert {row[0] for row in table["data"]} == {"test, base (RL base)", f"test, chosen (step {summary['chosen_step']})"}
    assert all(row[5].startswith(f"## {row[1]}") for row in table["data"])  # the decoded episode


def test_a_sweep_runs_wandb_group_is_its_sweep():
    from bugfix_rl.config import TrainConfig
    from bugfix_rl.present.wandb_run import run_identity

    config = dataclasses.asdict(TrainConfig(arm="env.reward=mixed", experiment="smoke", seed=1))
    swept = run_identity(config, Path("outputs/multirun/smoke/2026-12-03_07-55-16/env.reward=mixed_seed1_3"))
    assert swept["group"] == "smoke/2026-12-03_07-55-16" and swept["name"] == "smoke-env.reward=mixed-seed1"
    assert run_identity(config, Path("outputs/smoke/2026-12-03_07-55-16_env.reward=mixed_seed1"))["group"] == "smoke"


def test_dashboard_png_exists_and_summary_references_it(smoke_run):
    assert (smoke_run / "dashboard.png").read_bytes().startswith(PNG_MAGIC)
    assert "![dashboard](dashboard.png)" in (smoke_run / "summary.md").read_text()
    assert json.loads((smoke_run / "preflight.json").read_text())  # train ran the real preflight first


def test_success_counts_hidden_tests_not_the_training_reward():
    class Info:
        def __init__(self, success):
            self.success = success

    # a public-reward arm is paid 1.0 for a hardcoded table that fails the hidden tests
    hacked = [Trajectory([1], [False], [0.0], 1.0, 0, Info(False)), Trajectory([1], [False], [0.0], 0.0, 0, Info(True))]
    assert success_counts(hacked, 1).tolist() == [1]


def test_dashboard_panels_keep_sizes_apart_and_show_validation_with_its_interval():
    import matplotlib.pyplot as plt

    from bugfix_rl.present.dashboard import dashboard_figure

    rows = [{"step": s, "reward": 0.1 * s, "pass_rate": 0.1 * s, "entropy": 0.3, "approx_kl": 1e-3, "clip_frac": 0.01,
             "grad_norm": 1.3, "logp_gap": 1e-6} for s in range(4)]
    validation = {0: {"pass_at_1": 0.1, "ci": [0.0, 0.3]}, 3: {"pass_at_1": 0.4, "ci": [0.2, 0.6]}}
    fig = dashboard_figure(rows, "t", validation)
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    labels = {title: [line.get_label() for line in ax.get_lines()] for title, ax in panels.items()}
    assert labels["update size"][:2] == ["approx_kl", "clip_frac"] and panels["update size"].get_yscale() == "log"
    assert labels["gradient"] == ["grad_norm"]  # not on the axis of approx_kl and clip_frac
    assert "pass_rate (= above)" in labels["outcome"]  # drawn dashed over reward, not hidden under it
    dashed = [line for line in panels["outcome"].get_lines() if line.get_label() == "pass_rate (= above)"]
    assert dashed[0].get_linestyle() == "--"
    legend = [text.get_text() for text in panels["outcome"].get_legend().get_texts()]
    assert "validation pass@1 [95% CI]" in legend
    plt.close(fig)


def test_a_checkpoint_config_with_the_old_sandbox_keys_still_loads():
    """Checkpoints written before the sandbox limits moved to env.sandbox.* name them env.sandbox_*."""
    import dataclasses

    from bugfix_rl.config import TrainConfig
    from bugfix_rl.evaluate.checkpoint_eval import config_from_meta

    raw = dataclasses.asdict(TrainConfig())
    del raw["env"]["sandbox"]
    raw["env"].update(sandbox_workers=1, sandbox_min_isolation=["rlimits", "netns"])
    cfg = config_from_meta({"config": raw}, "old.safetensors")
    assert cfg.env.sandbox.workers == 1 and cfg.env.sandbox.min_isolation == ["rlimits", "netns"]
    assert cfg.env.sandbox.timeout_s == TrainConfig().env.sandbox.timeout_s


def test_report_refuses_runs_with_different_episode_counts(tmp_path):
    _fake_run(tmp_path, "default", 0, [4, 2], 4, heldout=True)
    _fake_run(tmp_path, "kl", 0, [8, 4], 8, heldout=True)
    with pytest.raises(ReportError, match="different episode counts on the heldout tasks \\(4, 8\\)"):
        build_report(tmp_path, "default")


def test_report_shapes_table_by_hand_and_the_primary_source_untouched(tmp_path):
    heldout = {("default", 0): [4, 2], ("default", 1): [3, 2], ("kl", 0): [4, 3], ("kl", 1): [2, 2]}
    shapes = {("default", 0): [1, 0, 2], ("default", 1): [0, 0, 1], ("kl", 0): [3, 1, 2], ("kl", 1): [2, 0, 4]}
    for key in heldout:
        _fake_run(tmp_path / "with", *key, heldout[key], 4, heldout=True, shapes=shapes[key])
        _fake_run(tmp_path / "without", *key, heldout[key], 4, heldout=True)
    report, plain = build_report(tmp_path / "with", "default"), build_report(tmp_path / "without", "default")
    assert report.source == "heldout" and plain.shapes is None
    assert [(r.diff, r.per_seed) for r in report.rows] == [(r.diff, r.per_seed) for r in plain.rows]
    assert report.power == plain.power
    rates = {arm: torch.tensor([shapes[arm, s] for s in (0, 1)], dtype=torch.float64) / 4 for arm in ("default", "kl")}
    by_hand = arm_difference(rates["kl"], rates["default"])
    _, kl = report.shapes
    assert kl.per_seed == pytest.approx([0.5, 0.5]) and kl.seed_aware
    assert kl.diff == pytest.approx((float(by_hand.diff), float(by_hand.lo), float(by_hand.hi)))
    header, cells = shapes_table(report)
    assert header[2] == "shapes pass@1 by seed" and cells[1][4].startswith(f"{float(by_hand.diff):+.3f} [")


def test_report_shapes_val_table_by_hand_in_report_md_the_console_and_the_page(tmp_path):
    """eval.shapes_val_n: the arms on the `shapes_val` tasks get their own table after the shapes one, by the
    same interval; a sweep run with shapes_val alone gets that table and no shapes table."""
    from rich.console import Console

    from bugfix_rl.present.ablation_report import write_report
    from bugfix_rl.present.tables import print_report
    from bugfix_rl.present.viewer import sweep_page

    heldout = {("default", 0): [4, 2], ("default", 1): [3, 2], ("kl", 0): [4, 3], ("kl", 1): [2, 2]}
    val = {("default", 0): [0, 1, 2, 0], ("default", 1): [1, 1, 0, 0], ("kl", 0): [2, 3, 2, 1], ("kl", 1): [4, 1, 2, 2]}
    for key in heldout:
        _fake_run(tmp_path, *key, heldout[key], 4, heldout=True, shapes_val=val[key])
    report = build_report(tmp_path, "default")
    assert report.shapes is None and report.source == "heldout"
    rates = {arm: torch.tensor([val[arm, s] for s in (0, 1)], dtype=torch.float64) / 4 for arm in ("default", "kl")}
    by_hand = arm_difference(rates["kl"], rates["default"])
    _, kl = report.shapes_val
    assert kl.per_seed == pytest.approx([0.5, 0.5625]) and kl.seed_aware
    assert kl.diff == pytest.approx((float(by_hand.diff), float(by_hand.lo), float(by_hand.hi)))
    header, cells = shapes_table(report, "shapes_val")
    assert header[2] == "shapes_val pass@1 by seed" and cells[1][4].startswith(f"{float(by_hand.diff):+.3f} [")
    markdown = write_report(report)[0].read_text()
    assert "## shapes_val (new function shapes for choosing a recipe)" in markdown and "## Shapes (" not in markdown
    assert "pass@1 on 4 `shapes_val` tasks" in markdown and "| kl | 0 1 | 0.500 0.562 |" in markdown
    console = Console(record=True, width=200)
    print_report(report, console)
    assert "shapes_val (new function shapes for choosing a recipe)" in console.export_text()
    page = sweep_page(report)
    assert "<h2>shapes_val</h2>" in page and "id='shapes_val'" in page and "<h2>Shapes</h2>" not in page


def test_report_shapes_val_table_over_templates_by_hand(tmp_path):
    """Generated tasks (several per template: the name before its last '-'): the new-shape table adds the
    same seed-aware interval with each template's tasks averaged into one unit, in the console, report.md
    and the page; the reference's cell says so, and a table of one task per template has no such column."""
    from rich.console import Console

    from bugfix_rl.present.ablation_report import write_report
    from bugfix_rl.present.tables import print_report
    from bugfix_rl.present.viewer import sweep_page

    names = ["minmax/two_caps-a1", "minmax/two_caps-b2", "minmax/two_caps-c3", "zero/chain-d4", "zero/chain-e5",
             "init/loop-f6"]
    val = {("default", 0): [0, 1, 2, 0, 1, 4], ("default", 1): [1, 1, 0, 0, 2, 3], ("default", 2): [0, 0, 1, 1, 1, 4],
           ("kl", 0): [4, 3, 4, 0, 1, 4], ("kl", 1): [3, 4, 4, 1, 0, 3], ("kl", 2): [4, 4, 3, 0, 1, 4]}
    for key, counts in val.items():
        _fake_run(tmp_path, *key, [4, 2], 4, heldout=True, shapes_val=counts, shapes_val_names=names)
    report = build_report(tmp_path, "default")
    rates = {arm: torch.tensor([val[arm, s] for s in (0, 1, 2)], dtype=torch.float64) / 4 for arm in ("default", "kl")}
    over_templates = {arm: torch.stack([r[:, :3].mean(1), r[:, 3:5].mean(1), r[:, 5]], 1) for arm, r in rates.items()}
    by_hand = arm_difference(over_templates["kl"], over_templates["default"])
    default, kl = report.shapes_val
    assert default.diff_over_templates is None
    assert kl.diff_over_templates == pytest.approx((float(by_hand.diff), float(by_hand.lo), float(by_hand.hi)))
    over_tasks = arm_difference(rates["kl"], rates["default"])
    assert kl.diff == pytest.approx((float(over_tasks.diff), float(over_tasks.lo), float(over_tasks.hi)))
    header, cells = shapes_table(report, "shapes_val")
    cell = f"{float(by_hand.diff):+.3f} [{float(by_hand.lo):+.3f}, {float(by_hand.hi):+.3f}]"
    assert header[-1] == "vs default over templates [95% CI]" and cells[0][-1] == "reference" and cells[1][-1] == cell
    markdown = write_report(report)[0].read_text()
    assert f"| {cell} |" in markdown and "each of the 3 templates' tasks averaged into one unit" in markdown
    console = Console(record=True, width=250)
    print_report(report, console)
    assert cell in console.export_text()
    assert cell in sweep_page(report)
    one_seed = tmp_path / "one_seed"  # one seed per arm: the interval leaves seeds out, and says so
    for key in (("default", 0), ("kl", 0)):
        _fake_run(one_seed, *key, [4, 2], 4, heldout=True, shapes_val=val[key], shapes_val_names=names)
    _, cells = shapes_table(build_report(one_seed, "default"), "shapes_val")
    assert cells[1][4].endswith(" tasks only") and cells[1][-1].endswith(" templates only")
    one_each = tmp_path / "one_each"
    for key, counts in val.items():
        _fake_run(one_each, *key, [4, 2], 4, heldout=True, shapes_val=counts)
    header, _ = shapes_table(build_report(one_each, "default"), "shapes_val")
    assert not any("over templates" in column for column in header)


def test_new_shape_evaluations_that_cannot_be_paired_are_a_note_not_a_failed_report(tmp_path):
    _fake_run(tmp_path, "default", 0, [4, 2], 4, heldout=True, shapes_val=[1, 2, 3])
    _fake_run(tmp_path, "default", 1, [3, 2], 4, heldout=True, shapes_val=[1, 2])  # other tasks
    report = build_report(tmp_path, "default")
    assert report.shapes_val is None and len(report.rows) == 1
    assert any(note.startswith("no shapes_val table: runs were evaluated on different shapes_val tasks")
               for note in report.notes)
    _fake_run(tmp_path / "partial", "default", 0, [4, 2], 4, heldout=True, shapes_val=[1, 2, 3])
    _fake_run(tmp_path / "partial", "default", 1, [3, 2], 4, heldout=True)
    partial = build_report(tmp_path / "partial", "default")
    assert partial.shapes_val is None
    assert any("only 1 of 2 runs evaluated the shapes_val tasks (eval.shapes_val_n > 0)" in note
               for note in partial.notes)


def test_report_names_runs_without_shapes_and_draws_no_shapes_table(tmp_path):
    _fake_run(tmp_path, "default", 0, [4, 2], 4, heldout=True, shapes=[1, 2, 3])
    _fake_run(tmp_path, "default", 1, [3, 2], 4, heldout=True)
    report = build_report(tmp_path, "default")
    assert report.shapes is None and shapes_table(report)[1] == []
    assert any("only 1 of 2 runs evaluated the shapes tasks" in note for note in report.notes)
