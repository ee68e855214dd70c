"""`bugfix-rl <command> [hydra overrides]`: each command is a Hydra app over conf/.

Exit codes: 0 ok, 1 a preflight or run failure, 2 bad input, 130 interrupted.

Bad input never ends in a traceback: overrides are checked against the config schema before Hydra
composes them (unknown key, wrong type, value outside its set -> one line naming the key and what is
allowed, exit code 2), then the composed config's values are validated (each run of a sweep) before
Hydra creates a run dir, so a bad value leaves no folder behind; a missing or corrupt checkpoint or
model, or a run dir with no runs, is bad input too (one line, exit 2). A failed preflight (in
`preflight` or before `train`) and the known failures of a run (every episode of a batch failed in its
env, a token path that drifted from the chat template) print one line and exit 1.
Ctrl-C prints one line (for train: the last checkpoint and the command that resumes from it), exit 130.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bugfix_rl.errors import UserError

COMMANDS = {  # command -> what it does (`bugfix-rl --help`)
    "train": "RL on the training tasks: preflight, GRPO steps, checkpoints chosen on validation, one test",
    "preflight": "the ten invariants of one update on the first batch (+1 or 2 with rollout workers or staleness, +1 for canary tasks), then stop",
    "eval": "evaluate a checkpoint (a run dir: its chosen one) on a split: eval ckpt=<file|run dir> [split=test n=32 compare=...]",
    "report": "ablation table, report.md and forest plot of a sweep: report dir=<multirun dir>",
    "export": "a trained policy in the Hugging Face layout: export ckpt=<file|run dir> out=<dir> (Qwen3: save_pretrained)",
    "sft": "SFT on demonstrations -> <run dir>/sft.safetensors (then train policy.init=<that file>)",
    "bench": "time the configured rollout path beside one process",
    "simulate": "size a rollout cluster (sync vs async pipeline) before paying for it",
    "starts": "compare starting policies before RL (pass@1/8, informative groups, entropy): starts.policies=[...]",
    "plan": "seeds x tasks x episodes a comparison needs, a sweep's MDE, GPU-hours: plan dir=<sweep> | compute=true",
}
CONF_DIR = Path(__file__).resolve().parent / "conf"  # in the wheel; in the repo a link to the top-level conf/
GROUPS = ("env", "policy", "algo", "logger", "exp", "ablation")
ADDED_GROUPS = ("exp", "ablation")  # null in train's defaults list: `exp=...`, or `+exp=...` as before
NO_RUN_DIR = ("preflight", "starts", "bench")  # they write no files: Hydra makes no run dir for them
EXIT_FAILED = 1  # a preflight or run failure
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports when the reader of a pipe closed it


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _schema_for(command: str):
    from bugfix_rl import config

    return {"eval": config.EvalCommandConfig, "report": config.ReportConfig, "export": config.ExportConfig,
            "simulate": config.SimulateConfig, "plan": config.PlanConfig}.get(command, config.TrainConfig)


def _group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _check_group(command: str, override, values: list[str]) -> None:
    """A config group override: one the command has (train's), with a known option."""
    from bugfix_rl.config.overrides import did_you_mean, field_names

    group = override.key_or_group
    if BODIES[command][1] != "train":
        keys = ", ".join(field_names(_schema_for(command)))
        why = (": a checkpoint is evaluated in the env it was trained in (its stored config)"
               if command == "eval" and group == "env" else "")
        raise UserError(f"{command} takes no config groups ({group}={','.join(values)}){why}; its keys: {keys}")
    options = _group_options(group)
    for value in values:
        if value not in options:
            raise UserError(f"unknown {group} '{value}'; {did_you_mean(value, options)}valid: {', '.join(options)}")


def choose_added_groups(command: str, args: list[str]) -> list[str]:
    """`+exp=capstone` as `exp=capstone` (and `+ablation=...` as `ablation=...`) for train's commands:
    both groups are in train's defaults list as null (conf/train.yaml), so Hydra chooses them without a
    `+` and refuses one; the `+` spelling that every recipe and doc used before means the same choice."""
    if BODIES[command][1] != "train":
        return args
    added = tuple(f"+{group}=" for group in ADDED_GROUPS)
    return [arg[1:] if arg.startswith(added) else arg for arg in args]


def check_overrides(command: str, args: list[str]) -> None:
    """Validate Hydra overrides against the schema and the config groups (raises UserError)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from bugfix_rl.config.overrides import check_key, check_value, plain_overrides

    schema = _schema_for(command)
    plain = plain_overrides(args)
    try:
        overrides = OverridesParser.create().parse_overrides(plain)
    except HydraException as err:
        raise UserError(f"cannot parse overrides: {str(err).splitlines()[0]}") from None
    for override in overrides:
        key = override.key_or_group
        if key.startswith("hydra"):
            continue
        values = (list(override.sweep_string_iterator()) if override.is_sweep_override()
                  else [override.get_value_element_as_str()] if not override.is_delete() else [])
        if key in GROUPS:
            _check_group(command, override, values)
            continue
        check_key(schema, key, GROUPS)
        for value in values:
            check_value(schema, key, value)


def _run_dir():
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def _guarded(fn):
    """Run a command body: known failures become one line, exit 2 for bad input, 1 for a failed run."""
    from bugfix_rl.errors import CheckpointError, PreflightFailed

    def wrapper(cfg):
        from bugfix_rl.policy.chat_template import TokenPathMismatch
        from bugfix_rl.rollout.env_errors import RolloutFailed
        from bugfix_rl.run.distributed import LearnerRankFailed
        from bugfix_rl.run.trainer import NonFiniteUpdate

        try:
            return fn(cfg)
        except (UserError, CheckpointError) as err:
            fail(str(err))
        except (PreflightFailed, TokenPathMismatch, RolloutFailed, NonFiniteUpdate, LearnerRankFailed) as err:
            fail(str(err), EXIT_FAILED)
    return wrapper


def _train(cfg):
    from bugfix_rl.commands.train import train_command
    from bugfix_rl.config import to_object

    if not train_command(to_object(cfg), _run_dir()):  # Ctrl-C: the resume command is printed
        raise SystemExit(EXIT_INTERRUPTED)


def _preflight(cfg):
    from bugfix_rl.commands.preflight import preflight_command
    from bugfix_rl.config import to_object

    if not preflight_command(to_object(cfg)):
        raise SystemExit(EXIT_FAILED)


def _eval(cfg):
    from bugfix_rl.commands.eval import eval_command
    from bugfix_rl.config import to_object

    eval_command(to_object(cfg))


def _report(cfg):
    from bugfix_rl.commands.report import report_command
    from bugfix_rl.config import to_object

    report_command(to_object(cfg))


def _export(cfg):
    from bugfix_rl.commands.export import export_command
    from bugfix_rl.config import to_object

    export_command(to_object(cfg))


def _sft(cfg):
    from bugfix_rl.commands.sft import sft_command
    from bugfix_rl.config import to_object

    sft_command(to_object(cfg), _run_dir())


def _bench(cfg):
    from bugfix_rl.commands.bench import bench_command
    from bugfix_rl.config import to_object

    bench_command(to_object(cfg))


def _simulate(cfg):
    from bugfix_rl.commands.simulate import simulate_command
    from bugfix_rl.config import to_object

    try:
        simulate_command(to_object(cfg))
    except ValueError as err:
        raise UserError(str(err)) from None


def _starts(cfg):
    from bugfix_rl.commands.starts import starts_command
    from bugfix_rl.config import to_object

    starts_command(to_object(cfg))


def _plan(cfg):
    from bugfix_rl.commands.plan import plan_command
    from bugfix_rl.config import to_object
    from bugfix_rl.evaluate.ablation import ReportError

    try:
        plan_command(to_object(cfg))
    except (ValueError, ReportError) as err:
        raise UserError(str(err)) from None


BODIES = {"train": (_train, "train"), "preflight": (_preflight, "train"), "eval": (_eval, "eval"),
          "report": (_report, "report"), "export": (_export, "export"), "sft": (_sft, "train"), "bench": (_bench, "train"),
          "simulate": (_simulate, "simulate"), "plan": (_plan, "plan"),
          "starts": (_starts, "train")}


def compose_train(overrides: list[str]):
    """The TrainConfig that `bugfix-rl train <overrides>` composes, for scripts that build a run's parts
    without running it (no run dir, no Hydra logging). A config Hydra cannot compose, or one `validate`
    refuses, is a UserError (one line)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from bugfix_rl.config import register_configs, to_object

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        try:
            composed = compose("train", overrides=list(overrides))
        except HydraException as err:
            raise UserError(f"cannot compose the config: {str(err).splitlines()[0]}") from None
        return to_object(composed)


def print_help(command: str, args: list[str]) -> None:
    """`bugfix-rl <command> [overrides] --help`: its usage, its config groups (train's), and every key of
    the config those overrides compose, with its value and one-line description (present/help.py)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from bugfix_rl.config import register_configs
    from bugfix_rl.config.overrides import plain_overrides
    from bugfix_rl.present.help import config_help

    register_configs()
    config_name = BODIES[command][1]
    try:
        check_overrides(command, args)
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name, overrides=plain_overrides(args))
    except UserError as err:
        fail(str(err))
    except HydraException as err:
        fail(f"cannot compose the config: {str(err).splitlines()[0]}")
    print(f"usage: bugfix-rl {command} [key=value ...] [-m]\n{COMMANDS[command]}\n")
    if config_name == "train":
        print("config groups: pick one with group=option (exp=capstone; +exp=capstone, as before, too)")
        print("\n".join(f"  {group}: {', '.join(_group_options(group))}" for group in GROUPS) + "\n")
    print("config: every key, its value here, what it does; override any with key=value\n")
    print(config_help(_schema_for(command), OmegaConf.to_container(cfg, resolve=False)))
    print("\nbugfix-rl --help lists the commands and the exit codes; --cfg job prints the composed config;"
          " --hydra-help shows Hydra's own flags.")


def usage() -> str:
    """`bugfix-rl --help`: the commands, the config groups, the exit codes."""
    width = max(map(len, COMMANDS))
    commands = "\n".join(f"  {name:<{width}}  {what}" for name, what in COMMANDS.items())
    groups = "\n".join(f"  {group}: {', '.join(_group_options(group))}" for group in GROUPS)
    return (f"usage: bugfix-rl <command> [key=value ...] [-m] [--help] [--cfg job]\n\n"
            f"Train small coding agents with RL on a bug-fixing gym, and measure what they learned.\n\n"
            f"commands:\n{commands}\n\n"
            f"config groups of train, preflight, sft, starts and bench (group=option; exp=... also as +exp=...):\n"
            f"{groups}\n\n"
            f"bugfix-rl <command> --help: the command's config, every key with its default.\n"
            f"key=a,b ... -m: one run per value (a sweep; put -m last).\n"
            f"exit codes: 0 ok, 1 a preflight or run failure, 2 bad input, 130 interrupted (Ctrl-C).")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    from bugfix_rl.kernels import MODES, requested_mode

    if requested_mode() not in MODES:
        fail(f"BUGFIX_RL_KERNELS={requested_mode()} is not one of: {', '.join(MODES)}")
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        if argv and argv[0] not in ("-h", "--help"):
            from bugfix_rl.config.overrides import did_you_mean

            print(f"error: unknown command '{argv[0]}'; {did_you_mean(argv[0], COMMANDS)}valid: {', '.join(COMMANDS)}",
                  file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT)
        print(usage())
        return
    from bugfix_rl.commands.sweeps import quote_labels

    command, rest = argv[0], choose_added_groups(argv[0], quote_labels(argv[1:]))
    if {"-h", "--help"} & set(rest):
        print_help(command, [arg for arg in rest if arg not in ("-h", "--help")])
        return
    from bugfix_rl.commands.inputs import check_composed, recipe_hint
    from bugfix_rl.commands.train import resolve_resume
    from bugfix_rl.config import register_configs
    from bugfix_rl.config.overrides import plain_overrides
    from bugfix_rl.errors import CheckpointError

    register_configs()
    body, config_name = BODIES[command]
    flags = {arg for arg in rest if arg.startswith("-")}
    if command in NO_RUN_DIR and not flags and not any(arg.startswith("hydra.run.dir=") for arg in rest):
        rest = [*rest, "hydra.run.dir=.", "hydra.output_subdir=null"]  # no folder holding only .hydra
    try:
        check_overrides(command, rest)
        rest, notes = resolve_resume(rest) if command == "train" else (rest, [])
        if flags <= {"-m", "--multirun"}:  # --help, --cfg and other Hydra flags are left to Hydra
            check_composed(CONF_DIR, config_name, rest, multirun=bool(flags), command=command)
        if command == "train" and flags & {"-m", "--multirun"}:
            from hydra.core.override_parser.overrides_parser import OverridesParser

            from bugfix_rl.commands.sweeps import arm_overrides, single_job_note

            parsed = OverridesParser.create().parse_overrides(plain_overrides(rest))
            if single_job_note(parsed):
                print(f"note: {single_job_note(parsed)}", file=sys.stderr)
            rest = arm_overrides(parsed) + rest
    except (UserError, CheckpointError) as err:
        fail(str(err))
    for note in notes:  # once the checks passed: bad input stays one line
        print(note, file=sys.stderr)
    hint = recipe_hint(command, plain_overrides(rest))
    if hint:
        print(f"note: {hint}", file=sys.stderr)
    import hydra

    app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(_guarded(body))
    sys.argv = [f"bugfix-rl {command}"] + rest
    try:
        app()
    except KeyboardInterrupt:  # outside a training loop (imports, model building, evaluation)
        print("interrupted", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None


def exit_status(code) -> int:
    """The process exit status Python gives `raise SystemExit(code)`: None -> 0, an int as is, anything
    else printed to stderr -> 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def console() -> None:
    """The `bugfix-rl` console script: main(), then a quick exit.

    After a command's work is done Python would spend about a second (1.0-1.4 s measured on this
    machine kind after `train`) finalizing the ~3,000 modules a run loads (torch, Hydra, matplotlib).
    Nothing is left for that to do once the atexit handlers (logging, wandb, multiprocessing) have run
    and stdout/stderr are flushed, so the process then ends with os._exit and main()'s exit status. A
    normal exit is kept while another non-daemon thread runs (Python would wait for it), under a
    profiler or tracer (`python -m cProfile`, a debugger, coverage: they write their results after the
    program returns) or `python -i`, for a status outside 0-255, and for an exception main() does not
    turn into SystemExit (its traceback is printed as usual). The C library's stdio buffers (output of
    C and C++ code) are flushed too, as C's exit() would."""
    try:
        main()
        status = 0
    except SystemExit as done:
        status = exit_status(done.code)
    except BrokenPipeError:  # the reader went away (`bugfix-rl --help | head`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more can reach the reader
        status = EXIT_BROKEN_PIPE
    import atexit
    import threading

    if _exit_needs_python(status) or any(t.is_alive() and not t.daemon for t in threading.enumerate()
                                         if t is not threading.main_thread()):
        raise SystemExit(status)
    atexit._run_exitfuncs()
    for stream in {sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__} - {None}:  # None: the fd was closed
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: Python's own exit would not print more either
            pass
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)  # C stdio: what C's exit() flushes and os._exit does not
    except (OSError, AttributeError):
        pass
    os._exit(status)


def _exit_needs_python(status: int) -> bool:
    """Whether the process must end through Python's own exit: a profiler, tracer or monitoring tool
    (cProfile, coverage, a debugger) writes its results then, `python -i` opens its prompt then, and
    os._exit takes only a status in 0-255."""
    monitored = hasattr(sys, "monitoring") and any(sys.monitoring.get_tool(i) for i in range(6))  # Python >= 3.12
    return (sys.getprofile() is not None or sys.gettrace() is not None or monitored or bool(sys.flags.inspect)
            or bool(os.environ.get("PYTHONINSPECT")) or not 0 <= status <= 255)


if __name__ == "__main__":
    console()
