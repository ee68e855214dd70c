"""The RL starting policy: TinyAgent behaviour-cloned on a noisy scripted agent, cached on disk.

This is the analog of a pretrained model (SPEC §3): it emits well-formed calls, reads before editing
only sometimes, and guesses the op otherwise. Each env has its own scripted agent and recipe
(`policy.base` for the edit menu, `policy.tools_base` for the tools env). The recipe is seeded and
its result is cached under `cache_dir` keyed by a hash of the recipe, the architecture and the
vocabulary, so every run (and every seed of a sweep) starts from the same weights. The bases of the
default config and of the experiments in conf/exp ship with the package (SHIPPED_DIR), so those runs
load theirs instead of building it.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from bugfix_rl.algo.sft import sft_train
from bugfix_rl.checkpoint import CheckpointError, load_checkpoint, load_model_state, model_tensors, save_checkpoint
from bugfix_rl.gym.agents.scripted import NoisyPolicy
from bugfix_rl.gym.edit_menu import RENAME_POOL, EditMenuConfig, EditMenuEnv
from bugfix_rl.gym.generator import training_pool
from bugfix_rl.gym.tasks import OPERAND_POOL, base_task_name, with_renamed_operands
from bugfix_rl.kernels import kernel_signature, set_torch_threads
from bugfix_rl.policy.tiny import TinyAgent, TinyAgentConfig, architecture, new_tiny_agent
from bugfix_rl.policy.tokenizer import Tokenizer
from bugfix_rl.registry import Registry
from bugfix_rl.rollout.sampler import scripted_episode

if TYPE_CHECKING:
    from bugfix_rl.progress import PhaseProgress


def _nothing(*_) -> None:
    pass


def noisy_demonstrations(recipe, tokenizer: Tokenizer, env_cfg=None, on_episode: Callable[[], None] = _nothing):
    """`recipe.episodes` noisy scripted edit-menu episodes on renamed training tasks (the run's training
    pool: env.generated_tasks adds to the book's), always in the default EditMenuConfig (the base does not
    depend on the run's other env settings); on_episode() after each."""
    rng = random.Random(recipe.seed)
    tasks = training_pool(env_cfg)
    variants = [with_renamed_operands(task, rng.sample(OPERAND_POOL, len(OPERAND_POOL)), str(k))
                for task in tasks for k in range(recipe.variants_per_task)]
    knobs = {k: getattr(recipe, k) for k in ("p_read", "p_right_after_read", "p_test", "p_wander",
                                             "p_malformed", "p_exploit")}
    demos = []
    for i in range(recipe.episodes):
        task = rng.choice(variants) if rng.random() < recipe.p_renamed_operands else tasks[i % len(tasks)]
        env = EditMenuEnv(task, EditMenuConfig(), rng.choice(RENAME_POOL))
        demos.append(scripted_episode(NoisyPolicy(rng, **knobs), env, tokenizer))
        on_episode()
    return demos


def noisy_tools_demonstrations(recipe, tokenizer: Tokenizer, env_cfg, on_episode: Callable[[], None] = _nothing):
    """`recipe.episodes` NoisyToolsPolicy episodes on training tasks (the run's training pool: env.generated_tasks
    adds to the book's; renamed operands mostly, shape variants of the book's with probability
    recipe.p_shape_variant), in a tools env of `env_cfg` with its own sandbox (Bash runs, the final grading
    and the generated tasks' checks need one); on_episode() after each."""
    from bugfix_rl.gym.agents.scripted_tools import NoisyToolsPolicy
    from bugfix_rl.gym.shape_variants import shape_variant
    from bugfix_rl.gym.tools.env import make_tools_env_factory

    rng = random.Random(recipe.seed)
    knobs = {k: getattr(recipe, k) for k in ("p_read", "p_read_after_fail", "p_right_after_read", "p_miscopy",
                                             "p_retry", "p_test", "p_wander", "p_malformed", "p_fix_after_fail",
                                             "p_syntax_slip")}
    # The run's env.check_edit_syntax is left out: it refuses edits RL's policy makes, and one scripted slip
    # (a name swap that cuts a line short) would otherwise give the same recipe key two bases. The
    # demonstrations check Edits' syntax when their agent slips on purpose (p_syntax_slip, in the key).
    make_env, close = make_tools_env_factory(env_cfg, check_edit_syntax=recipe.p_syntax_slip > 0)
    try:
        tasks = training_pool(env_cfg, make_env.sandbox)
        demos = []
        for i in range(recipe.episodes):
            task = tasks[i % len(tasks)]
            if recipe.p_shape_variant > 0 and rng.random() < recipe.p_shape_variant:
                task = shape_variant(task, rng) or task
            if rng.random() < recipe.p_renamed_operands:
                task = with_renamed_operands(task, rng.sample(OPERAND_POOL, len(OPERAND_POOL)), f"d{i}")
            memory = [with_renamed_operands(t, rng.sample(OPERAND_POOL, len(OPERAND_POOL)), "m")
                      for t in rng.sample(tasks, 3) if t.name != base_task_name(task.name)]
            env = make_env(task, rng.choice(RENAME_POOL))
            demos.append(scripted_episode(NoisyToolsPolicy(rng, memory, **knobs), env, tokenizer))
            on_episode()
    finally:
        close()
    return demos


# env.name -> (the recipe field of PolicyConfig, (recipe, tokenizer, env_cfg, on_episode) -> demonstrations)
BASE_RECIPES = Registry("env", {"edit_menu": ("base", noisy_demonstrations),
                                "tools": ("tools_base", noisy_tools_demonstrations)})


def cache_root(policy_cfg) -> Path:
    import os

    return Path(policy_cfg.cache_dir or os.environ.get("BUGFIX_RL_CACHE") or Path.home() / ".cache" / "bugfix_rl")


# Bases shipped in the package, named as in the cache (`<prefix>-<recipe key>.safetensors`): the bases of
# the experiments in conf/exp that train TinyAgent from policy.init=rl_base, built on portable kernels by
# `make bases` (scripts/ship_bases.py). A recipe key covers everything the weights depend on, so a shipped
# file is found exactly when a build here would give the same bytes; otherwise the base is built and cached.
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "bases"


def shipped_base(path: Path) -> Path:
    """The shipped copy of the base cached at `path` (it may not exist)."""
    return SHIPPED_DIR / path.name


# The code a base's weights depend on besides its recipe: the gym (tasks, envs, renderings, and the scripted
# agents in gym/agents), how their episodes are tokenised and collated (types.py), the model and behaviour
# cloning.
BASE_CODE = ("gym/**/*.py", "policy/tiny.py", "policy/copy_head.py", "policy/copy_lookup.py", "policy/tokenizer.py",
             "recipes/rl_base.py", "rollout/sampler.py", "types.py", "algo/sft.py", "algo/packing.py")


@functools.lru_cache(maxsize=2)
def base_code_version(package: Path | None = None) -> str:
    """A hash of the syntax trees of BASE_CODE under `package` (default: this bugfix_rl; comments do not
    count): a base built by other code must not load under the same recipe, as one built by 8d99d7d's
    shape-variant kinds once did."""
    package = package or Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for pattern in BASE_CODE:
        for path in sorted(package.glob(pattern)):
            digest.update(path.relative_to(package).as_posix().encode())
            digest.update(ast.dump(ast.parse(path.read_text())).encode())
    return digest.hexdigest()[:16]


def recipe_key(recipe, arch: TinyAgentConfig, tokenizer: Tokenizer, env_fields: dict | None = None) -> str:
    """The cache key of a base: a hash of everything its weights depend on (the recipe, the architecture,
    the vocabulary, the env fields its demonstrations ran in, the code that makes it, torch's version
    and the CPU kernels)."""
    blob = json.dumps([dataclasses.asdict(recipe) if dataclasses.is_dataclass(recipe) else dict(recipe),
                       dataclasses.asdict(arch), tokenizer.words, base_code_version(), torch.__version__,
                       kernel_signature()]
                      + ([env_fields] if env_fields else []), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _load_cached(path: Path, model: TinyAgent) -> bool:
    """Load the cached base at `path` into model; False when there is none or it is damaged (rebuilt)."""
    if not path.is_file():
        return False
    try:
        tensors, _ = load_checkpoint(path)
        load_model_state(model, tensors, path)
        return True
    except CheckpointError:
        return False


@contextlib.contextmanager
def _one_builder(path: Path, say: Callable[[str], None]):
    """Hold an exclusive lock on `<path>.lock` while a base is built: a second process that needs the
    same base (another job of a sweep, another test worker) waits for it and loads it, instead of
    building the same weights beside it at half the speed. Where the cache directory cannot hold a
    lock file, or its file system has no locks (some network mounts), build without one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(path.name + ".lock"), "w")
    except OSError:
        yield
        return
    with handle:
        locked = True
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another process that is building {path.name}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:
            locked = False
        try:
            yield
        finally:
            if locked:
                fcntl.flock(handle, fcntl.LOCK_UN)


def base_path(tokenizer: Tokenizer, policy_cfg, env_cfg=None) -> Path:
    """Where the RL base of env_cfg's env (default: the edit menu) is cached: its recipe key's file."""
    env_name = env_cfg.name if env_cfg is not None else "edit_menu"
    recipe = getattr(policy_cfg, BASE_RECIPES[env_name][0])
    prefix, env_fields = "rl_base", None
    if env_name != "edit_menu":  # its demonstrations run in the run's env settings
        prefix = f"rl_base_{env_name}"
        env_fields = {k: getattr(env_cfg, k) for k in ("max_turns", "max_calls_per_turn", "rename")}
    if env_cfg is not None and env_cfg.generated_tasks > 0:  # its demonstrations draw from the training pool
        env_fields = {**(env_fields or {}), "generated_tasks": env_cfg.generated_tasks,
                      "generated_seed": env_cfg.generated_seed,
                      **({"generated_reshape": env_cfg.generated_reshape} if env_cfg.generated_reshape else {}),
                      **({"generated_grammar": env_cfg.generated_grammar} if env_cfg.generated_grammar else {}),
                      **({"generated_grammar_flat_pairs": True} if env_cfg.generated_grammar_flat_pairs else {}),
                      **({"generated_two_line_minmax": env_cfg.generated_two_line_minmax}
                         if env_cfg.generated_two_line_minmax else {}),
                      **({"generated_two_line_compare": env_cfg.generated_two_line_compare}
                         if env_cfg.generated_two_line_compare else {})}
    key = recipe_key(recipe, architecture(policy_cfg), tokenizer, env_fields)
    return cache_root(policy_cfg) / f"{prefix}-{key}.safetensors"


def make_rl_base(tokenizer: Tokenizer, policy_cfg, cache: bool = True, env_cfg=None,
                 progress: PhaseProgress | None = None) -> TinyAgent:
    """Load the cached RL base of env_cfg's env (default: the edit menu) or build it by its recipe
    (deterministic for a given thread count). A build says what it builds and where it caches it, with
    progress bars when `progress` draws them (default: the two lines only)."""
    env_name = env_cfg.name if env_cfg is not None else "edit_menu"
    recipe_field, make_demos = BASE_RECIPES[env_name]
    recipe, arch = getattr(policy_cfg, recipe_field), architecture(policy_cfg)
    path = base_path(tokenizer, policy_cfg, env_cfg)
    model = new_tiny_agent(tokenizer, arch)
    if cache and (_load_cached(path, model) or _load_cached(shipped_base(path), model)):
        return model
    if progress is None:
        from bugfix_rl.progress import PhaseProgress

        progress = PhaseProgress(bars=False)
    if not cache:
        return _build(tokenizer, recipe, arch, env_name, env_cfg, make_demos, None, progress)
    say = ((lambda line: progress.console.print(line, soft_wrap=True, markup=False, highlight=False))
           if progress.lines else _nothing)
    with _one_builder(path, say):
        if _load_cached(path, model):  # built by the process this one waited for
            return model
        return _build(tokenizer, recipe, arch, env_name, env_cfg, make_demos, path, progress)


def _build(tokenizer: Tokenizer, recipe, arch: TinyAgentConfig, env_name: str, env_cfg, make_demos,
           path: Path | None, progress: PhaseProgress) -> TinyAgent:
    """Build a base by its recipe (deterministic for a given thread count) and save it at `path`
    (None: not cached)."""
    cache = path is not None
    where = f"cached at {path}, so later runs load it" if cache else "not cached"
    announcement = (f"building the {env_name} RL base, the starting policy of policy.init=rl_base "
                    f"({recipe.episodes} scripted episodes, {recipe.steps} behaviour-cloning steps; {where})")
    threads = torch.get_num_threads()
    set_torch_threads(recipe.threads)  # not on the run's thread count; MKL's branch settled first (kernels.py)
    try:
        with progress.phase(announcement, done=f"{env_name} RL base built"):
            torch.manual_seed(recipe.seed)
            model = new_tiny_agent(tokenizer, arch)
            with progress.stage("scripted episodes", recipe.episodes) as advance:
                demos = make_demos(recipe, tokenizer, env_cfg, advance)
            demos = [d for d in demos if len(d.ids) <= arch.max_len]  # a longer one has no positions to train on
            with progress.stage("behaviour cloning", recipe.steps) as advance:
                sft_train(model, demos, recipe.steps, recipe.lr, recipe.batch_size,
                          torch.Generator().manual_seed(recipe.seed),
                          length_buckets=recipe.length_buckets, pack_rows=recipe.pack_rows,
                          lr_schedule=recipe.lr_schedule,
                          on_step=lambda loss: advance(f"loss {loss:.3f}"))
    finally:
        torch.set_num_threads(threads)
    if cache:
        save_checkpoint(path, model_tensors(model), {"kind": "rl_base", "recipe": dataclasses.asdict(recipe)
                                                     if dataclasses.is_dataclass(recipe) else dict(recipe)})
    return model
