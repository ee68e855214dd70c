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

import dataclasses
import os
import shlex
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
ADDED_GROUPS = ("exp", "ablation")  # not in train's defaults list: `+exp=...`
FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                    "--config-dir", "-cd", "--experimental-rerun", "--info", "-i"}
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


def _field_names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def did_you_mean(word: str, choices) -> str:
    """ "did you mean 'x'? " for the closest of `choices` to a mistyped `word`, else "" """
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'? " if close else ""


def _check_group(command: str, override, values: list[str]) -> None:
    """A config group override: one the command has (train's), added with `+` where the default config
    does not list it (exp, ablation), with a known option."""
    group = override.key_or_group
    if BODIES[command][1] != "train":
        keys = ", ".join(_field_names(_schema_for(command)))
        why = (": a checkpoint is evaluated in the env it was trained in (its stored config)"
               if command == "eval" and group == "env" else "")
        raise UserError(f"{command} takes no config groups ({group}={','.join(values)}){why}; its keys: {keys}")
    if group in ADDED_GROUPS and not override.is_add() and not override.is_force_add():
        raise UserError(f"{group}={','.join(values)} needs a '+': +{group}={','.join(values)} (an {group} is "
                        "added to the config, not chosen in place of a default)")
    options = _group_options(group)
    for value in values:
        if value not in options:
            raise UserError(f"unknown {group} '{value}'; {did_you_mean(value, options)}valid: {', '.join(options)}")


def _check_key(schema, key: str) -> None:
    node = schema
    parts = key.split(".")
    for depth, part in enumerate(parts):
        names = _field_names(node)
        if part not in names:
            where = ".".join(parts[:depth]) or "the top level"
            hint = did_you_mean(part, names + (list(GROUPS) if depth == 0 else []))
            raise UserError(f"unknown config key '{key}'; {hint}valid keys in {where}: {', '.join(names)}")
        field = next(f for f in dataclasses.fields(node) if f.name == part)
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else None
        if depth < len(parts) - 1:
            if not dataclasses.is_dataclass(default):
                raise UserError(f"'{'.'.join(parts[:depth + 1])}' has no sub-keys (in '{key}')")
            node = type(default)


def _check_value(schema, key: str, value: str) -> None:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from bugfix_rl.config import CHOICES

    if key in CHOICES and value not in CHOICES[key]:
        raise UserError(f"{key}={value} is not allowed; valid values: {', '.join(CHOICES[key])}")
    try:
        OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.from_dotlist([f"{key}={value}"]))
    except OmegaConfBaseException as err:
        reason = str(err).splitlines()[0]
        raise UserError(f"bad value for '{key}': {reason}") from None


def _plain_overrides(args: list[str]) -> list[str]:
    """The `key=value` arguments, without Hydra's flags and their values."""
    plain, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg.startswith("-"):
            skip = arg in FLAGS_WITH_VALUE and "=" not in arg
            continue
        plain.append(arg)
    return plain


def quote_labels(args: list[str]) -> list[str]:
    """`reference=env.reward=hidden` or `ckpt=<sweep>/env.reward=hidden_seed0_0` as Hydra can parse them
    (the value quoted): a sweep's arm label (sweeps.py), and so its run dirs, hold `=` (and `,` when
    several keys vary), which Hydra reads as syntax; an unquoted value with `=` is never valid Hydra."""
    quoted = []
    for arg in args:
        key, _, value = arg.partition("=")
        plain = not arg.startswith("-") and value[:1] not in ("'", '"', "$", "[", "{")
        quoted.append(f"{key}='{value}'" if plain and "=" in value and "'" not in value else arg)
    return quoted


def check_overrides(command: str, args: list[str]) -> None:
    """Validate Hydra overrides against the schema and the config groups (raises UserError)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    schema = _schema_for(command)
    plain = _plain_overrides(args)
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
        _check_key(schema, key)
        for value in values:
            _check_value(schema, key, value)


def resolve_resume(args: list[str]) -> tuple[list[str], list[str]]:
    """(`args` with each `resume=<run dir>` value replaced by that run's last checkpoint (inputs.
    resume_checkpoint), one line per replacement naming the checkpoint). Done before Hydra composes, so
    the run dir's name (config.resumed_tag), the checks (inputs.check_resume), training and a Ctrl-C's
    resume command all see the checkpoint file. A folder without checkpoints raises UserError."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from bugfix_rl.inputs import resume_checkpoint

    resolved, notes, skip = [], [], False
    for arg in args:
        plain = not skip and not arg.startswith("-")
        skip = not plain and arg in FLAGS_WITH_VALUE and "=" not in arg
        override = OverridesParser.create().parse_override(arg) if plain else None
        if override is None or override.key_or_group != "resume" or override.is_delete():
            resolved.append(arg)
            continue
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [override.value()]
        files = [resume_checkpoint(value) if isinstance(value, str) else value for value in values]
        for folder, file in zip(values, files):
            if file != folder:
                notes.append(f"resume={folder} is a run dir: resuming from its last checkpoint {file}")
        if files == values:
            resolved.append(arg)
        else:
            quoted = [f"'{file}'" if "'" not in file else file for file in files]
            resolved.append(f"{arg.split('=', 1)[0]}={','.join(quoted)}")
    return resolved, notes


def check_composed(config_name: str, args: list[str], multirun: bool, command: str | None = None) -> None:
    """Compose the config as Hydra will and validate its values, then what `command` reads and where it
    writes (inputs.py; raises UserError or CheckpointError), before Hydra creates a run dir: bad input
    leaves no folder behind. A sweep (-m) is checked run by run."""
    import itertools

    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from bugfix_rl.inputs import check_inputs, check_writable

    choices = []  # per override: the `key=value` strings it stands for
    for override in OverridesParser.create().parse_overrides(_plain_overrides(args)):
        key = override.get_key_element()
        if override.is_sweep_override():
            values = list(override.sweep_string_iterator())
            if not multirun:
                raise UserError(f"{override.input_line} gives several values: add -m to run each one, "
                                f"or write {key}=[{','.join(values)}] for one list value")
            choices.append([f"{key}={value}" for value in values])
        else:
            choices.append([override.input_line])
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for run in itertools.product(*choices):
            try:
                cfg = compose(config_name, overrides=list(run), return_hydra_config=True)
            except HydraException as err:
                raise UserError(f"cannot compose the config: {str(err).splitlines()[0]}") from None
            output = _output_dir(cfg, multirun)
            del cfg.hydra
            obj = _to_object(cfg)
            if command:
                check_inputs(command, obj)
            if output:
                check_writable(output)


def _output_dir(cfg, multirun: bool) -> str | None:
    """The run dir (the sweep dir under -m) Hydra will create, or None where it creates none (`.`)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    node = cfg.hydra.sweep if multirun else cfg.hydra.run
    try:
        folder = OmegaConf.to_container(node, resolve=True)["dir"]
    except OmegaConfBaseException:  # an interpolation only a running job resolves: its fixed prefix
        folder = str(OmegaConf.to_container(node, resolve=False)["dir"]).split("$", 1)[0] or "."
    return None if folder in (".", "") else folder


def _to_object(cfg):
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue

    from bugfix_rl.config import ConfigError, validate

    try:
        obj = OmegaConf.to_object(cfg)
    except MissingMandatoryValue as err:
        key = getattr(err, "full_key", None) or str(err).splitlines()[0]
        raise UserError(f"missing required value: pass {key}=<value>") from None
    if hasattr(obj, "algo"):
        try:
            validate(obj)
        except ConfigError as err:
            raise UserError(str(err)) from None
    return obj


def _run_dir():
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def _guarded(fn):
    """Run a command body: known failures become one line, exit 2 for bad input, 1 for a failed run."""
    from bugfix_rl.errors import CheckpointError

    def wrapper(cfg):
        from bugfix_rl.distributed import LearnerRankFailed
        from bugfix_rl.policy.chat_template import TokenPathMismatch
        from bugfix_rl.rollout.env_errors import RolloutFailed
        from bugfix_rl.train import NonFiniteUpdate, PreflightFailed

        try:
            return fn(cfg)
        except (UserError, CheckpointError) as err:
            fail(str(err))
        except (PreflightFailed, TokenPathMismatch, RolloutFailed, NonFiniteUpdate, LearnerRankFailed) as err:
            fail(str(err), EXIT_FAILED)
    return wrapper


def _resume_command(checkpoint: Path, arm: str) -> str:
    """The command that continues this run from `checkpoint`: the same overrides (so the same config);
    a sweep's arm label (sweeps.py) as the value it resolved to."""
    from hydra.core.hydra_config import HydraConfig

    overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith("resume=")]
    if any(o.startswith(("arm=${", "arm='${")) for o in overrides):
        overrides = [o for o in overrides if not o.startswith("arm=")] + [f"arm='{arm}'"]
    return shlex.join(["bugfix-rl", "train", *overrides, f"resume={checkpoint}"])


def _train(cfg):
    from bugfix_rl.console import print_outcome
    from bugfix_rl.distributed import learner_ranks
    from bugfix_rl.train import RunInterrupted, follow_run, run_training

    run_dir, cfg = _run_dir(), _to_object(cfg)
    try:
        with learner_ranks(cfg) as rank:
            if rank > 0:  # under torchrun: a follower of rank 0, which writes the run dir
                follow_run(cfg)
                return
            result = run_training(cfg, run_dir)
    except RunInterrupted as err:
        if err.checkpoint is None:
            print(f"{err}, before the first checkpoint: nothing to resume ({run_dir})", file=sys.stderr)
        else:
            print(f"{err}; last checkpoint {err.checkpoint}; resume with: {_resume_command(err.checkpoint, cfg.arm)}",
                  file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    print_outcome(result, run_dir)  # a sweep's end prints the report command (sweeps.SweepProgress)


def _preflight(cfg):
    from bugfix_rl.commands import preflight_command

    if not preflight_command(_to_object(cfg)):
        raise SystemExit(EXIT_FAILED)


def _eval(cfg):
    from bugfix_rl.commands import eval_command

    eval_command(_to_object(cfg))


def _report(cfg):
    from bugfix_rl.commands import report_command

    report_command(_to_object(cfg))


def _export(cfg):
    from bugfix_rl.export import export_command

    export_command(_to_object(cfg))


def _sft(cfg):
    from bugfix_rl.commands import sft_command

    sft_command(_to_object(cfg), _run_dir())


def _bench(cfg):
    from bugfix_rl.bench import bench_command

    bench_command(_to_object(cfg))


def _simulate(cfg):
    from bugfix_rl.simulate import simulate_command

    try:
        simulate_command(_to_object(cfg))
    except ValueError as err:
        raise UserError(str(err)) from None


def _starts(cfg):
    from bugfix_rl.commands import starts_command

    starts_command(_to_object(cfg))


def _plan(cfg):
    from bugfix_rl.evaluate.ablation import ReportError
    from bugfix_rl.plan import plan_command

    try:
        plan_command(_to_object(cfg))
    except (ValueError, ReportError) as err:
        raise UserError(str(err)) from None


BODIES = {"train": (_train, "train"), "preflight": (_preflight, "train"), "eval": (_eval, "eval"),
          "report": (_report, "report"), "export": (_export, "export"), "sft": (_sft, "train"), "bench": (_bench, "train"),
          "simulate": (_simulate, "simulate"), "plan": (_plan, "plan"),
          "starts": (_starts, "train")}


def print_help(command: str, args: list[str]) -> None:
    """`bugfix-rl <command> [overrides] --help`: its usage, its config groups (train's), and every key of
    the config those overrides compose, with its value and one-line description (help.py)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from bugfix_rl.config import register_configs
    from bugfix_rl.help import config_help

    register_configs()
    config_name = BODIES[command][1]
    try:
        check_overrides(command, args)
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name, overrides=_plain_overrides(args))
    except UserError as err:
        fail(str(err))
    except HydraException as err:
        fail(f"cannot compose the config: {str(err).splitlines()[0]}")
    print(f"usage: bugfix-rl {command} [key=value ...] [-m]\n{COMMANDS[command]}\n")
    if config_name == "train":
        print("config groups: pick one with group=option (exp and ablation with a +: +exp=capstone)")
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
            f"config groups of train, preflight, sft, starts and bench (group=option; +exp=... and +ablation=...):\n"
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
            print(f"error: unknown command '{argv[0]}'; {did_you_mean(argv[0], COMMANDS)}valid: {', '.join(COMMANDS)}",
                  file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT)
        print(usage())
        return
    command, rest = argv[0], quote_labels(argv[1:])
    if {"-h", "--help"} & set(rest):
        print_help(command, [arg for arg in rest if arg not in ("-h", "--help")])
        return
    from bugfix_rl.errors import CheckpointError
    from bugfix_rl.config import register_configs
    from bugfix_rl.inputs import recipe_hint

    register_configs()
    body, config_name = BODIES[command]
    flags = {arg for arg in rest if arg.startswith("-")}
    if command in NO_RUN_DIR and not flags and not any(arg.startswith("hydra.run.dir=") for arg in rest):
        rest = [*rest, "hydra.run.dir=.", "hydra.output_subdir=null"]  # no folder holding only .hydra
    try:
        check_overrides(command, rest)
        rest, notes = resolve_resume(rest) if command == "train" else (rest, [])
        if flags <= {"-m", "--multirun"}:  # --help, --cfg and other Hydra flags are left to Hydra
            check_composed(config_name, rest, multirun=bool(flags), command=command)
        if command == "train" and flags & {"-m", "--multirun"}:
            from hydra.core.override_parser.overrides_parser import OverridesParser

            from bugfix_rl.sweeps import arm_overrides, single_job_note

            parsed = OverridesParser.create().parse_overrides(_plain_overrides(rest))
            if single_job_note(parsed):
                print(f"note: {single_job_note(parsed)}", file=sys.stderr)
            rest = arm_overrides(parsed) + rest
    except (UserError, CheckpointError) as err:
        fail(str(err))
    for note in notes:  # once the checks passed: bad input stays one line
        print(note, file=sys.stderr)
    hint = recipe_hint(command, _plain_overrides(rest))
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
