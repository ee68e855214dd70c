"""Config schemas: every default is written here once; the YAML files under conf/ only override.

One module per config group: env.py (`env=`), policy.py (`policy=`), algo.py (`algo=`), run.py (logger,
eval, stop and the rest of a run, with `TrainConfig` holding them all), commands.py (eval, export,
report, plan, simulate). The schemas are registered in Hydra's ConfigStore, so an unknown key or a
value of the wrong type is rejected when the config is composed; validate.py then checks the values
that must come from a fixed set and names the allowed ones.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from bugfix_rl.config.algo import AlgoConfig, TurnCreditConfig
from bugfix_rl.config.commands import (ComputeBudget, EvalCommandConfig, ExportConfig, PlanConfig, ReportConfig,
                                       SimulateConfig)
from bugfix_rl.config.env import EnvConfig, SandboxLimits
from bugfix_rl.config.overrides import set_dotted
from bugfix_rl.config.policy import BaseRecipeConfig, PolicyConfig, ToolsBaseRecipeConfig
from bugfix_rl.config.resolvers import register_resolvers, resumed_tag
from bugfix_rl.config.run import (BenchConfig, ColdStartConfig, EvalConfig, LoggerConfig, RolloutConfig, StartsConfig,
                                  StopConfig, TrainConfig, TrainerConfig)
from bugfix_rl.config.validate import CHOICES, POSITIVE, ConfigError, to_object, validate

__all__ = ["AlgoConfig", "BaseRecipeConfig", "BenchConfig", "CHOICES", "ColdStartConfig", "ComputeBudget",
           "ConfigError", "EnvConfig", "EvalCommandConfig", "EvalConfig", "ExportConfig", "LoggerConfig", "POSITIVE",
           "PlanConfig", "PolicyConfig", "ReportConfig", "RolloutConfig", "SandboxLimits", "SimulateConfig",
           "StartsConfig", "StopConfig", "ToolsBaseRecipeConfig", "TrainConfig", "TrainerConfig", "TurnCreditConfig",
           "register_configs", "resumed_tag", "set_dotted", "to_object", "validate"]


def register_configs() -> None:
    """Register each command's schema with Hydra's ConfigStore (conf/<command>.yaml's `<command>_schema`)
    and the resolvers its interpolations call."""
    register_resolvers()
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="eval_schema", node=EvalCommandConfig)
    cs.store(name="export_schema", node=ExportConfig)
    cs.store(name="report_schema", node=ReportConfig)
    cs.store(name="simulate_schema", node=SimulateConfig)
    cs.store(name="plan_schema", node=PlanConfig)
