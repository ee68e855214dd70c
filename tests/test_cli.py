"""Bad input gets one clear line and exit code 2, never a traceback.

The cases run `bugfix-rl` in the test process (tests/in_process.py); the console script itself (a fresh
process: its exit status, one line on stderr, its quick exit) is run by the tests that say so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from in_process import cli_result

CASES = [
    (["train", "algo.adv_mod=grpo"], "unknown config key 'algo.adv_mod'", "adv_mode"),
    (["train", "algo.adv_mode=ppo"], "algo.adv_mode=ppo is not allowed", "dr_grpo"),
    (["train", "algo.lr=fast"], "bad value for 'algo.lr'", "fast"),
    (["train", "algo=nope"], "unknown algo 'nope'", "grpo"),
    (["train", "seed=0,x", "-m"], "bad value for 'seed'", "x"),
    (["train", "nonsense=1"], "unknown config key 'nonsense'", "steps"),
    (["train", "algo.group_size=1"], "algo.group_size=1 must be >= 2", ""),
    (["preflight", "env.reward=secret"], "env.reward=secret is not allowed", "public"),
    (["frobnicate"], "unknown command 'frobnicate'", "train"),
    (["train", "rollout.max_staleness=1"], "rollout.max_staleness=1 needs algo.tis_cap", "tis_cap=2.0"),
    (["train", "rollout.workers=-1"], "rollout.workers=-1 must be >= 0", ""),
    (["train", "rollout.engine=spark"], "rollout.engine=spark is not allowed", "ray, local"),
    (["bench", "bench.repeats=0"], "bench.repeats=0 must be > 0", ""),
    (["sft", "cold_start.source=web"], "cold_start.source=web is not allowed", "oracle"),
    (["train", "policy.copy_resume_cut=true"], "policy.copy_resume_cut needs policy.copy_edit_resume=true", ""),
    (["train", "policy.copy_resume_next=true"], "policy.copy_resume_next needs policy.copy_edit_resume=true", ""),
    (["train", "policy.copy_lookup=true"], "policy.copy_lookup needs policy.copy_head=true and env=tools", ""),
    (["train", "+exp=tools", "policy.copy_lookup=true", "policy.copy_ngram=1"], "policy.copy_lookup needs policy.copy_ngram >= 2",
     ""),
    (["train", "+exp=tools", "policy.copy_lookup_feed=true"],
     "policy.copy_lookup_feed reads the lookup output's target: it needs policy.copy_lookup=true", ""),
    (["eval", "env=tools", "ckpt=x"], "eval takes no config groups (env=tools)", "the env it was trained in"),
    (["report", "algo=dapo", "dir=x"], "report takes no config groups (algo=dapo)", "dir, reference"),
    (["train", "stpes=3"], "unknown config key 'stpes'; did you mean 'steps'?", ""),
    (["train", "+exp=capstne"], "unknown exp 'capstne'; did you mean 'capstone'?", "smoke"),
    (["trian"], "unknown command 'trian'; did you mean 'train'?", "eval"),
]


def _run(args):
    return cli_result(*args)


@pytest.mark.parametrize("args,message,names", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_config_is_one_line_exit_2(args, message, names):
    result = _run(args)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert message in lines[0] and names in lines[0]


def test_help_and_cfg_job_work():
    assert _run(["train", "--help"]).returncode == 0
    shown = _run(["train", "+exp=capstone", "--cfg", "job"])
    assert shown.returncode == 0 and "steps: 60" in shown.stdout


def test_exp_and_ablation_are_chosen_with_or_without_a_plus():
    """exp and ablation are null in train's defaults list, so `exp=capstone` chooses one as any group
    is chosen; `+exp=capstone`, the spelling of every recipe before, composes the same config."""
    plain = _run(["train", "exp=ablation", "ablation=kl", "--cfg", "job"])
    plus = _run(["train", "+exp=ablation", "+ablation=kl", "--cfg", "job"])
    assert plain.returncode == 0 and plus.returncode == 0, plain.stderr + plus.stderr
    assert plain.stdout == plus.stdout and "arm: kl" in plain.stdout and "experiment: ablation" in plain.stdout


def test_missing_resume_checkpoint_is_one_line_exit_2_from_the_console_script(tmp_path):
    result = subprocess.run([str(Path(sys.executable).parent / "bugfix-rl"), "train", "+exp=smoke",
                             f"resume={tmp_path}/nope.safetensors", f"hydra.run.dir={tmp_path}/run"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "checkpoint not found" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


CONSOLE = """
import atexit, sys, threading
from bugfix_rl import cli
atexit.register(lambda: print("atexit ran", flush=False))
def fake_main():
    print("work done", flush=False)  # left in stdout's buffer: the quick exit must flush it
    if sys.argv[1] == "thread":
        threading.Thread(target=lambda: (__import__("time").sleep(0.3), print("thread finished"))).start()
    raise SystemExit({"ok": None, "two": 2, "text": "a message", "thread": 3}[sys.argv[1]])
cli.main = fake_main
cli.console()
print("not reached")
"""


@pytest.mark.parametrize("how,status", [("ok", 0), ("two", 2), ("text", 1), ("thread", 3)])
def test_console_script_exits_quickly_with_mains_status(how, status):
    """The console script ends with main()'s exit status after the atexit handlers and with every byte
    of stdout written; a running non-daemon thread is waited for, as a normal exit would."""
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout in a buffer, as usual
    result = subprocess.run([sys.executable, "-c", CONSOLE, how], capture_output=True, text=True, timeout=60,
                            env=buffered)
    assert result.returncode == status, result.stderr
    assert result.stdout.splitlines()[0] == "work done" and "atexit ran" in result.stdout
    assert "not reached" not in result.stdout
    assert ("a message" in result.stderr) == (how == "text")
    assert ("thread finished" in result.stdout) == (how == "thread")


def test_console_script_under_a_profiler_exits_normally_so_the_profile_is_written(tmp_path):
    """`python -m cProfile -o FILE` writes FILE after the program returns: the quick exit must not skip it."""
    script = tmp_path / "console.py"
    script.write_text(CONSOLE)
    out = tmp_path / "profile.out"
    result = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), str(script), "two"],
                            capture_output=True, text=True, timeout=60)
    assert "work done" in result.stdout, result.stderr  # (cProfile itself exits 0 after a SystemExit)
    assert out.exists() and out.stat().st_size > 0


def test_console_script_with_stdout_closed_exits_with_mains_status():
    """`bugfix-rl ... >&-`: sys.stdout is None; the quick exit must not trip over it."""
    result = subprocess.run([sys.executable, "-c", CONSOLE, "ok"], stdout=None, stderr=subprocess.PIPE, text=True,
                            timeout=60, preexec_fn=lambda: os.close(1))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_console_script_flushes_what_c_code_printed():
    """Output of C code (stdio, e.g. a library's log lines) sits in the C library's buffer when stdout is a
    pipe; C's exit() flushes it, and so must the quick exit."""
    script = CONSOLE.replace('print("work done", flush=False)',
                             'print("work done", flush=True); __import__("ctypes").CDLL(None).printf(b"from C\\n")')
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    result = subprocess.run([sys.executable, "-c", script, "ok"], capture_output=True, text=True, timeout=60, env=buffered)
    assert result.returncode == 0, result.stderr
    assert "from C" in result.stdout


def test_a_train_or_eval_process_never_imports_scipy_stats():
    """scipy.stats costs 0.84 s to import (2-core Xeon); the commands' modules use scipy.special's
    quantiles and import scipy.stats only inside the functions that need it (McNemar, power)."""
    code = ("import sys, bugfix_rl.cli, bugfix_rl.run.training, bugfix_rl.commands.eval, bugfix_rl.commands.report, "
            "bugfix_rl.commands.preflight, bugfix_rl.commands.starts, bugfix_rl.commands.sft, bugfix_rl.run.preflight, "
            "bugfix_rl.present.tables, bugfix_rl.evaluate.power; print('scipy.stats' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr


def test_env_tools_alone_says_at_start_which_recipe_learns_it():
    """issue 38: `train env=tools` trained the edit menu's policy settings on the tools env, scored 0.000
    everywhere and said nothing; it now names +exp=tools in one line before anything runs."""
    alone = _run(["train", "env=tools", "--cfg", "job"])
    assert alone.returncode == 0, alone.stderr
    assert [line for line in alone.stderr.splitlines() if line.startswith("note:")] == [
        "note: env=tools alone keeps the edit menu's policy settings, which do not learn this env;"
        " the recipe that learns it is `bugfix-rl train +exp=tools` (docs/TOOLS.md)"]
    recipe = _run(["train", "+exp=tools", "--cfg", "job"])
    assert recipe.returncode == 0 and "note:" not in recipe.stderr, recipe.stderr


@pytest.mark.parametrize("command", ["train", "eval", "report", "simulate", "plan"])
def test_help_describes_every_key_in_one_line(command):
    """issue 38: `train --help` listed ~190 keys with no description; now each key shows its value here
    and the comment written beside its field in the config package."""
    import dataclasses

    from bugfix_rl.cli import _schema_for
    from bugfix_rl.present.help import described_keys

    rows = described_keys(_schema_for(command), {})
    assert [key for key, _, about in rows if not about] == []
    shown = _run([command, "--help"])
    assert shown.returncode == 0, shown.stderr
    leaves = [key for key, value, _ in rows if value]
    listed = [line.split(" = ")[0] for line in shown.stdout.splitlines() if " = " in line]
    assert listed == leaves and len(leaves) > (150 if command == "train" else 1)
    if command == "train":
        steps = next(f for f in dataclasses.fields(_schema_for(command)) if f.name == "steps")
        assert any(line.startswith(f"steps = {steps.default} ") and line.endswith("then the update)")
                   for line in shown.stdout.splitlines())


def test_help_piped_into_a_reader_that_is_gone_ends_without_a_traceback():
    """`bugfix-rl train --help | head -1`: once the reader has closed the pipe, the command stops quietly
    with the shell's status for SIGPIPE (141), no BrokenPipeError traceback. The read end is closed
    before the command starts, so its first write meets the closed pipe whatever the timing."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([str(Path(sys.executable).parent / "bugfix-rl"), "train", "--help"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
    assert result.returncode == 141


def test_compose_train_gives_the_config_train_composes_and_one_line_errors():
    """cli.compose_train, which the scripts compose with: the preset's values, and a key Hydra cannot
    override or a value validate refuses as a UserError, never a Hydra traceback."""
    from bugfix_rl.cli import compose_train
    from bugfix_rl.errors import UserError

    cfg = compose_train(["exp=tools_generated", "seed=3"])
    assert cfg.experiment == "tools_generated" and cfg.seed == 3 and cfg.env.generated_tasks == 1000
    with pytest.raises(UserError, match="^cannot compose the config: Could not override 'policy.nonsense'"):
        compose_train(["policy.nonsense=1"])
    with pytest.raises(UserError, match="must be >= 2"):
        compose_train(["algo.group_size=1"])
