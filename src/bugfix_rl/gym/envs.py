"""Environment registry: config -> a factory `make_env(task, shown_name)` and its clean-up."""

from __future__ import annotations

from typing import Callable

from bugfix_rl.gym.edit_menu import EditMenuConfig, EditMenuEnv
from bugfix_rl.gym.regrade import Regrade, regraded_env_class
from bugfix_rl.registry import Registry


def _edit_menu(env_cfg):
    env_class = EditMenuEnv
    regrade = regrade_of(env_cfg)
    if regrade.active:  # env.reward_flip_rate / env.grade_reruns (regrade.py); off: the gym's class itself
        env_class = regraded_env_class(EditMenuEnv)
        env_class.regrade = regrade
    config = EditMenuConfig(max_turns=env_cfg.max_turns, max_edits=env_cfg.max_edits, rename=env_cfg.rename,
                            reward=env_cfg.reward, partial_alpha=env_cfg.partial_alpha, flaky_rate=env_cfg.flaky_rate,
                            step_penalty=env_cfg.step_penalty, truncation=env_cfg.truncation,
                            leak_canary=env_cfg.leak_canary)
    return (lambda task, name: env_class(task, config, name)), (lambda: None)


def _tools(env_cfg):
    from bugfix_rl.gym.tools.env import make_tools_env_factory

    make_env, close = make_tools_env_factory(env_cfg)
    if env_cfg.infra_fault_rate > 0:  # a test hook: the RL base's own env (built in gym) never gets it
        make_env.sandbox.inject_grading_faults(env_cfg.infra_fault_rate)
    regrade = regrade_of(env_cfg)
    if regrade.active:  # env.reward_flip_rate / env.grade_reruns (regrade.py)
        inner = make_env

        def make_env(task, name):
            env = inner(task, name)
            env.__class__ = _regraded_class(type(env), regrade)  # the same object, its reward regraded
            return env

        make_env.sandbox = inner.sandbox
    return make_env, close


_REGRADED: dict = {}


def _regraded_class(env_class: type, regrade):
    key = (env_class, regrade)
    if key not in _REGRADED:
        _REGRADED[key] = regraded_env_class(env_class)
        _REGRADED[key].regrade = regrade
    return _REGRADED[key]


def regrade_of(env_cfg):
    return Regrade(getattr(env_cfg, "reward_flip_rate", 0.0), getattr(env_cfg, "grade_reruns", 1))


ENVS: dict[str, Callable] = Registry("env", {"edit_menu": _edit_menu, "tools": _tools})


def _oracle_edit_menu():
    from bugfix_rl.gym.agents.scripted import OraclePolicy

    return OraclePolicy


def _oracle_tools():
    from bugfix_rl.gym.agents.scripted_tools import ToolsOraclePolicy

    return ToolsOraclePolicy


ORACLES: dict[str, Callable] = Registry("env", {"edit_menu": _oracle_edit_menu, "tools": _oracle_tools})


def oracle_for(env_cfg):
    """The scripted oracle policy class of an env (observation text -> next action's words)."""
    return ORACLES[env_cfg.name]()


def make_env_factory(env_cfg) -> tuple[Callable, Callable[[], None]]:
    return ENVS[env_cfg.name](env_cfg)


def env_sandbox(make_env: Callable):
    """The sandbox an env factory's episodes run on (the tools env's), or None (the edit menu has none)."""
    return getattr(make_env, "sandbox", None)
