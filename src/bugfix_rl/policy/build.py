"""Policy registry: config -> tokenizer and model (TinyAgent now; Qwen3 through transformers)."""

from __future__ import annotations

from bugfix_rl.checkpoint import load_checkpoint, load_model_state
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.rl_base import architecture, make_rl_base
from bugfix_rl.policy.tiny import TinyAgent
from bugfix_rl.policy.tokenizer import Tokenizer, build_tokenizer


def build_tokenizer_for(cfg) -> Tokenizer:
    """The word tokenizer over all tasks, plus the tools env's words when that env is selected."""
    extra = set()
    if cfg.env.name == "tools":
        from bugfix_rl.gym.tool_calls import tools_vocabulary

        extra = tools_vocabulary(make_tasks("all"))
    return build_tokenizer(make_tasks("all"), extra)


def build_policy(policy_cfg, tokenizer: Tokenizer, init: str | None = None):
    """A TinyAgent from `init` (default policy_cfg.init): rl_base, scratch, or a checkpoint path."""
    init = init or policy_cfg.init
    if init == "rl_base":
        return make_rl_base(tokenizer, policy_cfg)
    model = TinyAgent(tokenizer.vocab_size, architecture(policy_cfg))
    if init == "scratch":
        return model
    tensors, meta = load_checkpoint(init)
    if meta.get("vocab") is not None and list(meta["vocab"]) != list(tokenizer.words):
        from bugfix_rl.checkpoint import CheckpointError

        raise CheckpointError(f"checkpoint {init} was trained with a different vocabulary (another env?)")
    load_model_state(model, tensors, init)
    return model
