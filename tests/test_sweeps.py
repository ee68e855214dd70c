"""A sweep's runs are labelled by what the sweep varies (issue 38): `env.reward=hidden,mixed -m` gives
the arms `env.reward=hidden` and `env.reward=mixed`, and `report` compares them (every run used to be
arm `default`, and the report kept one run per seed)."""

from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from in_process import CliResult, cli_result

from bugfix_rl.commands.sweeps import arm_overrides, quote_labels, single_job_note
from bugfix_rl.config.resolvers import arm_label


def _extra(*args: str) -> list[str]:
    return arm_overrides(OverridesParser.create().parse_overrides(list(args)))


def test_arm_label_is_the_runs_values_of_the_swept_keys():
    assert arm_label("env.reward=mixed") == "env.reward=mixed"
    assert arm_label("+ablation=kl,env.reward=mixed") == "kl,env.reward=mixed"
    assert arm_label("algo.lr=0.002,algo=dapo") == "algo.lr=0.002,algo=dapo"
    assert arm_label("policy.init=/tmp/a/sft.safetensors") == "policy.init=_tmp_a_sft.safetensors"  # one folder


@pytest.mark.parametrize("args", [("seed=0,1",), ("+ablation=default,kl", "seed=0,1"), ("arm=a,b", "env.reward=hidden,mixed"),
                                  ("env.reward=mixed",)])
def test_no_arm_override_where_the_arm_is_named_already_or_nothing_varies(args):
    assert _extra(*args) == []


def test_a_plain_key_sweep_names_its_arms_from_the_swept_keys_only():
    extra = _extra("+exp=smoke", "env.reward=hidden,mixed", "seed=0,1", "steps=1")
    assert extra == ["hydra.job.config.override_dirname.exclude_keys=[arm,exp,seed,steps]",
                     "arm='${arm_label:${hydra:job.override_dirname}}'"]


def test_an_arm_or_a_run_dir_with_equals_signs_can_be_passed_back():
    assert quote_labels(["reference=env.reward=hidden", "dir=x", "arm=a", "arm='x=y'", "-m",
                         "ckpt=s/env.reward=hidden,algo.lr=0.1_seed0_0/c.safetensors"]) == [
        "reference='env.reward=hidden'", "dir=x", "arm=a", "arm='x=y'", "-m",
        "ckpt='s/env.reward=hidden,algo.lr=0.1_seed0_0/c.safetensors'"]


def _cli(*args: str) -> CliResult:
    return cli_result(*args)  # in this process (tests/in_process.py)


def test_a_sweep_over_a_plain_key_reports_two_arms_named_by_it(tmp_path):
    sweep = tmp_path / "sweep"
    run = _cli("train", "+exp=smoke", "steps=1", "threads=1", "preflight=false", "env.reward=hidden,mixed",
               f"hydra.sweep.dir={sweep}", "-m")
    assert run.returncode == 0, run.stderr[-2000:]
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["env.reward=hidden_seed0_0",
                                                                   "env.reward=mixed_seed0_1"]
    # each job says where the sweep is as it starts; the sweep's end, the next command (issue 38)
    assert "[1/2] env.reward=hidden\n" in run.stderr and "[2/2] env.reward=mixed\n" in run.stderr
    assert run.stdout.rstrip().endswith(f"sweep done: 2 runs in {sweep}; compare them with: bugfix-rl report dir={sweep}")
    assert "report dir=" not in run.stdout.rstrip().rsplit("\n", 1)[0]  # once, at the end, not after each run
    report = _cli("report", f"dir={sweep}")
    assert report.returncode == 0, report.stderr
    assert "2 runs, 2 arms" in report.stdout and "appears twice" not in report.stdout
    table = (sweep / "report.md").read_text()
    assert "| env.reward=hidden |" in table and "| env.reward=mixed |" in table
    again = _cli("report", f"dir={sweep}", "reference=env.reward=mixed")  # the other arm as reference, unquoted
    assert again.returncode == 0, again.stderr
    assert "vs env.reward=mixed" in (sweep / "report.md").read_text()


def test_a_sweep_flag_without_swept_values_says_it_runs_one_job():
    parse = OverridesParser.create().parse_overrides
    assert "runs one job" in single_job_note(parse(["+exp=smoke", "steps=1"]))
    assert single_job_note(parse(["+exp=smoke", "seed=0,1"])) is None


def _eval_json(folder, **splits) -> None:
    import json

    folder.mkdir(parents=True)
    (folder / "eval.json").write_text(json.dumps({"chosen_step": 1, **splits}))


def test_a_sweeps_end_says_when_its_runs_printed_another_score_than_report_compares(tmp_path):
    from bugfix_rl.commands.sweeps import sweep_end_lines

    for seed in (0, 1):  # eval.test=false, eval.heldout_n > 0: each run printed validation pass@1
        _eval_json(tmp_path / "val" / f"a_seed{seed}_{seed}", validation={}, heldout={})
    done, note = sweep_end_lines(str(tmp_path / "val"), 2)
    assert done == f"sweep done: 2 runs in {tmp_path / 'val'}; compare them with: bugfix-rl report dir={tmp_path / 'val'}"
    assert note == ("note: each run's line above gives its chosen checkpoint's validation pass@1; report compares"
                    " the arms on their held-out pass@1 (eval.heldout_n > 0)")
    for seed in (0, 1):  # test and held-out: test printed, held-out compared
        _eval_json(tmp_path / "both" / f"a_seed{seed}_{seed}", test={}, heldout={})
    assert "test pass@1; report compares the arms on their held-out" in sweep_end_lines(str(tmp_path / "both"), 2)[1]
    for seed in (0, 1):  # test only: the same score, no note
        _eval_json(tmp_path / "test" / f"a_seed{seed}_{seed}", test={})
    assert len(sweep_end_lines(str(tmp_path / "test"), 2)) == 1
    assert sweep_end_lines(str(tmp_path / "none"), 3) == [f"sweep done: 3 jobs in {tmp_path / 'none'}"]
