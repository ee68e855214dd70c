"""What a command reads and writes, checked before Hydra creates its run dir (issue 38).

check_composed runs `check_inputs` on each composed config (each run of a sweep), so a bad input
is one line, exit 2, and no folder: a `resume=` or `policy.init=` checkpoint that is missing, corrupt,
without resume state, trained on another env or not fitting the configured policy; a Qwen3 model that
is neither local nor cached; `starts` settings; an output dir that cannot be created; a `resume=` folder
without checkpoints (a run dir stands for its last checkpoint: resume_checkpoint); a `resume=` whose
steps taken had other learning rates than this run's schedule gives them (schedule_mismatch). Each check goes
through the loader the command itself uses (load_checkpoint, build_policy, the tokenizer loader), so
it passes only where the command would get past the same input.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bugfix_rl.errors import CheckpointError, UserError

NAMED_INITS = ("rl_base", "scratch", "pretrained")  # policy.init values that are not paths
ENV_RECIPE = {"tools": "+exp=tools"}  # env -> the experiment that trains a policy for it


def recipe_hint(command: str, overrides: list[str]) -> str | None:
    """One line for `train env=tools` without an experiment: the defaults' policy (no copy head) does
    not learn the tools env (0.000 everywhere, and no warning, in issue 38); +exp=tools does."""
    if command != "train" or any(o.lstrip("+").startswith("exp=") for o in overrides):
        return None
    env = [o.split("=", 1)[1] for o in overrides if o.startswith("env=")]
    if env and env[-1] in ENV_RECIPE:
        return (f"env={env[-1]} alone keeps the edit menu's policy settings, which do not learn this env;"
                f" the recipe that learns it is `bugfix-rl train {ENV_RECIPE[env[-1]]}` (docs/TOOLS.md)")
    return None


def check_composed(conf_dir: Path, config_name: str, args: list[str], multirun: bool, command: str | None = None) -> None:
    """Compose the config (`config_name` in `conf_dir`) as Hydra will and validate its values, then what
    `command` reads and where it writes (raises UserError or CheckpointError), before Hydra creates a run
    dir: bad input leaves no folder behind. A sweep (-m) is checked run by run."""
    import itertools

    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from bugfix_rl.config import to_object
    from bugfix_rl.config.overrides import plain_overrides

    choices = []  # per override: the `key=value` strings it stands for
    for override in OverridesParser.create().parse_overrides(plain_overrides(args)):
        key = override.get_key_element()
        if override.is_sweep_override():
            values = list(override.sweep_string_iterator())
            if not multirun:
                raise UserError(f"{override.input_line} gives several values: add -m to run each one, "
                                f"or write {key}=[{','.join(values)}] for one list value")
            choices.append([f"{key}={value}" for value in values])
        else:
            choices.append([override.input_line])
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        for run in itertools.product(*choices):
            try:
                cfg = compose(config_name, overrides=list(run), return_hydra_config=True)
            except HydraException as err:
                raise UserError(f"cannot compose the config: {str(err).splitlines()[0]}") from None
            output = _output_dir(cfg, multirun)
            del cfg.hydra
            obj = to_object(cfg)
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


def check_inputs(command: str, cfg) -> None:
    """Raise UserError or CheckpointError (one line) for an input `command` cannot use."""
    if command in ("train", "preflight", "sft", "starts", "bench"):
        check_policy_source(cfg)
    if command == "train" and cfg.logger.tensorboard:
        from bugfix_rl.present.tensorboard_run import available

        if not available():
            raise UserError("logger.tensorboard=true needs the tensorboard package, which is not installed:"
                            " pip install tensorboard (or drop logger=tensorboard)")
    if command == "train" and cfg.resume:
        check_resume(cfg)
    if command == "starts":
        check_starts(cfg.starts)
    if command == "export":
        check_export(cfg)


def _tokenizer(cfg):
    from bugfix_rl.policy.build import build_tokenizer_for

    return build_tokenizer_for(cfg)  # Qwen3: ModelNotFoundError (a CheckpointError) unless local or cached


def _check_env(key: str, path: str, meta: dict, cfg) -> None:
    trained = ((meta.get("config") or {}).get("env") or {}).get("name")
    if trained and trained != cfg.env.name:
        hint = f" (use it with {ENV_RECIPE[trained]})" if trained in ENV_RECIPE else f" (use it with env={trained})"
        raise UserError(f"{key}={path} was trained on env={trained}, but this run is env={cfg.env.name}{hint}")


def _check_fits(key: str, path: str, cfg, tokenizer) -> None:
    """The checkpoint's weights load into the configured policy (TinyAgent: cheap; Qwen3 is not built here)."""
    from bugfix_rl.policy.build import build_policy

    if cfg.policy.name != "tiny":
        return
    try:
        build_policy(cfg.policy, tokenizer, init=path)
    except CheckpointError as err:
        raise UserError(f"{key}: {err}") from None


def check_policy_source(cfg) -> None:
    """The configured policy can be built: its model (Qwen3) is there, its policy.init checkpoint fits."""
    init = cfg.policy.init
    if cfg.policy.name != "tiny" or init not in NAMED_INITS:
        tokenizer = _tokenizer(cfg)  # the word tokenizer is cheap; a chat model's says whether the model is there
    if init in NAMED_INITS:
        return
    if Path(init).is_dir():
        raise UserError(f"policy.init={init} is a directory; pass a checkpoint file "
                        f"(e.g. {init.rstrip('/')}/checkpoints/step_NNN.safetensors or sft.safetensors)")
    from bugfix_rl.checkpoint import load_checkpoint  # here: a config error answers before torch loads

    _, meta = load_checkpoint(init)
    _check_env("policy.init", init, meta, cfg)
    _check_fits("policy.init", init, cfg, tokenizer)


def resume_checkpoint(path: str) -> str:
    """The checkpoint `resume=<path>` continues from: `path` itself, or for a run dir its last checkpoint
    (what a TRL or verl user passes: the run, not a file in it); UserError for a folder without one."""
    if not Path(path).is_dir():
        return path
    last = last_checkpoint(Path(path))
    if last is None:
        raise UserError(f"resume={path} is a folder without checkpoints/step_*.safetensors: nothing to resume")
    return str(last)


def check_resume(cfg) -> None:
    """resume= names a checkpoint with resume state, of this env, whose weights fit this policy (a run
    dir has been replaced by its last checkpoint before: cli.resolve_resume)."""
    from bugfix_rl.checkpoint import load_checkpoint

    path = cfg.resume
    tensors, meta = load_checkpoint(path)
    if meta.get("kind") != "policy" or "rows" not in meta or "rng.generator" not in tensors:
        raise UserError(f"resume={path} has no resume state (kind {meta.get('kind')!r}, weights only): "
                        "start from it with policy.init= instead")
    _check_env("resume", path, meta, cfg)
    validated = ((meta.get("config") or {}).get("eval") or {}).get("val_splits", ["val"])
    if list(validated) != list(cfg.eval.val_splits):
        raise UserError(f"resume={path} was validated on eval.val_splits=[{','.join(validated)}], this run on "
                        f"[{','.join(cfg.eval.val_splits)}]: resume with eval.val_splits=[{','.join(validated)}]")
    mismatch = schedule_mismatch((meta.get("config") or {}), cfg, int(meta.get("step", 0)))
    if mismatch:
        raise UserError(f"resume={path} {mismatch}")
    _check_fits("resume", path, cfg, _tokenizer(cfg))


def schedule_mismatch(saved: dict, cfg, taken: int) -> str | None:
    """Why resuming, under `cfg`, a run whose config was `saved` (a checkpoint's meta) after `taken` steps
    would not continue it as `cfg` would have run from the start, or None: some step already taken had a
    learning rate (algo/lr_schedule.py) other than `cfg`'s schedule gives it. Steps still to come may
    follow a new schedule (a longer run, a decay added to a constant run); checkpoints from before the
    schedule read as constant."""
    from bugfix_rl.algo.lr_schedule import lr_factor

    algo = saved.get("algo") or {}
    was = (algo.get("lr_schedule", "constant"), algo.get("lr_warmup_steps", 0), algo.get("lr_decay_steps", 0))
    now = (cfg.algo.lr_schedule, cfg.algo.lr_warmup_steps, cfg.algo.lr_decay_steps)
    steps = saved.get("steps", cfg.steps)
    try:
        if all(lr_factor(was[0], step, steps, *was[1:]) == lr_factor(now[0], step, cfg.steps, *now[1:])
               for step in range(taken)):
            return None
    except (ValueError, TypeError, ZeroDivisionError) as err:  # a config edited by hand
        return f"has a learning-rate schedule this version cannot read ({err})"
    settings = f"algo.lr_schedule={was[0]} algo.lr_warmup_steps={was[1]} algo.lr_decay_steps={was[2]} steps={steps}"
    return (f"took other learning rates in its first {taken} steps than this run's settings give them: resume with"
            f" {settings}, or start a new run from its weights with policy.init=<the checkpoint>")


def last_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoints/step_N.safetensors of a run dir (highest N: step_1000 after step_999), or None."""
    steps = [path for path in (run_dir / "checkpoints").glob("step_*.safetensors")
             if path.stem.removeprefix("step_").isdigit()]
    return max(steps, key=lambda path: int(path.stem.removeprefix("step_")), default=None)


def checkpoint_of(path: str) -> str:
    """`path` itself, or for a run dir its chosen checkpoint (eval.json's chosen_step: best validation),
    what `eval ckpt=<run dir>` evaluates; UserError for a run dir that has not finished."""
    import json

    folder = Path(path)
    if not folder.is_dir():
        return path
    result = folder / "eval.json"
    if not result.is_file():
        last = last_checkpoint(folder)
        raise UserError(f"{path} is a folder without eval.json (not a finished run), so it has no chosen checkpoint"
                        + (f"; pass a checkpoint, e.g. its last: {last}" if last else " and no checkpoints"))
    try:
        step = int(json.loads(result.read_text())["chosen_step"])
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"cannot read the chosen checkpoint from {result}: {type(err).__name__}: {err}") from None
    return str(folder / "checkpoints" / f"step_{step:03d}.safetensors")


def check_export(cfg) -> None:
    """`export ckpt=... out=...`: a checkpoint written by train or sft (a run dir: its chosen one), whose
    policy can be rebuilt (a Qwen3's model is there), and an `out` that is absent or an empty folder
    in a place that can be written (export.py writes nothing before this passes)."""
    from bugfix_rl.checkpoint import load_checkpoint

    ckpt = checkpoint_of(cfg.ckpt)
    _, meta = load_checkpoint(ckpt)
    if not isinstance(meta.get("config"), dict):
        raise UserError(f"ckpt={ckpt} holds no training config (kind {meta.get('kind')!r}): export takes a checkpoint"
                        " written by bugfix-rl train or sft, or a finished run dir")
    from bugfix_rl.evaluate.checkpoint_eval import config_from_meta

    _tokenizer(config_from_meta(meta, ckpt))  # a Qwen3 checkpoint: its base model (policy.model) is there
    out = Path(cfg.out)
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise UserError(f"out={cfg.out} already exists and is not an empty folder; choose a new one")
    check_writable(str(out.parent))


def check_starts(starts) -> None:
    """`bugfix-rl starts` settings: enough episodes for pass@8, a group, known policies."""
    if starts.n < 8 or starts.group_size < 2:
        raise UserError(f"starts.n={starts.n} must be >= 8 (pass@8) and starts.group_size={starts.group_size} >= 2")
    for name in starts.policies:
        if name not in ("rl_base", "sft", "scratch") and not Path(name).is_file():
            raise UserError(f"starts.policies: {name!r} is neither rl_base, sft, scratch nor a checkpoint file")


def check_writable(folder: str) -> None:
    """`folder` (a run or sweep dir) can be created and written: its nearest existing ancestor is a
    directory in which a directory can be made (tried, then removed: permission bits alone say nothing
    for root or on a read-only mount)."""
    path = Path(folder).absolute()
    ancestor = next(p for p in (path, *path.parents) if p.exists())
    if not ancestor.is_dir():
        raise UserError(f"cannot create the output dir {folder}: {ancestor} is a file, not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(dir=ancestor, prefix=".bugfix-rl-write-test-"))
    except OSError as err:
        raise UserError(f"cannot write the output dir {folder}: {err.strerror} in {ancestor}"
                        " (set hydra.run.dir=<dir> or hydra.sweep.dir=<dir> to write elsewhere)") from None
