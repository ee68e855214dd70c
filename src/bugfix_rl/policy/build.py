"""Policy registry: config -> tokenizer and model (TinyAgent; Qwen3 through transformers, policy/qwen3.py)."""

from __future__ import annotations

from bugfix_rl.checkpoint import CheckpointError, load_checkpoint, load_model_state
from bugfix_rl.config import PolicyConfig
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.rl_base import COPY_FIELDS, architecture, make_rl_base, new_tiny_agent
from bugfix_rl.policy.tokenizer import Tokenizer, build_tokenizer
from bugfix_rl.registry import Registry


def _word_tokenizer(cfg) -> Tokenizer:
    """The word tokenizer over all tasks, plus the tools env's words when that env is selected, with
    one out-of-vocabulary slot per context position."""
    extra = set()
    if cfg.env.name == "tools":
        from bugfix_rl.gym.tools.vocabulary import tools_vocabulary

        extra = tools_vocabulary(make_tasks("all"))
    return build_tokenizer(make_tasks("all"), extra, oov_slots=cfg.policy.max_len)


def _chat_tokenizer(cfg):
    from bugfix_rl.policy.qwen3 import load_chat_tokenizer

    return load_chat_tokenizer(cfg.policy)


def _tiny_agent(policy_cfg, tokenizer: Tokenizer, init: str, env_cfg=None, progress=None):
    """A TinyAgent from `init`: rl_base (of env_cfg's env; default the edit menu; `progress` shows its
    build), scratch, or a checkpoint path."""
    if init == "rl_base":
        return make_rl_base(tokenizer, policy_cfg, env_cfg=env_cfg, progress=progress)
    model = new_tiny_agent(tokenizer, architecture(policy_cfg))
    if init == "scratch":
        return model
    tensors, meta = load_checkpoint(init)
    if meta.get("vocab") is not None and list(meta["vocab"]) != list(tokenizer.words):
        raise CheckpointError(f"checkpoint {init} was trained with a different vocabulary (another env?)")
    stored = (meta.get("config") or {}).get("policy")
    for name in COPY_FIELDS if stored else ():  # the copy head's switches change what the same weights compute
        trained = stored.get(name, getattr(PolicyConfig(), name))  # absent: saved before the field existed
        if trained != getattr(policy_cfg, name):
            raise CheckpointError(f"checkpoint {init} was trained with policy.{name}={trained}, "
                                  f"not {getattr(policy_cfg, name)}")
    load_model_state(model, tensors, init)
    return model


def _qwen3(policy_cfg, tokenizer, init: str, env_cfg=None, progress=None):
    """A Hugging Face Qwen3 from policy.model (init 'pretrained'), or with a checkpoint's weights."""
    from bugfix_rl.policy.qwen3 import build_qwen3

    return build_qwen3(policy_cfg, tokenizer, init)


# policy.name -> (cfg -> tokenizer, (policy_cfg, tokenizer, init, env_cfg, progress) -> model)
TOKENIZERS = Registry("policy", {"tiny": _word_tokenizer, "qwen3": _chat_tokenizer})
POLICIES = Registry("policy", {"tiny": _tiny_agent, "qwen3": _qwen3})
# The cheapest init that builds a policy's architecture, for a replica whose weights are published to it
# (rollout workers): TinyAgent's random init, the chat model's own pretrained weights.
REPLICA_INIT = Registry("policy", {"tiny": "scratch", "qwen3": "pretrained"})


def build_tokenizer_for(cfg):
    """The policy's tokenizer (the word tokenizer for TinyAgent, the model's own for a chat model)."""
    return TOKENIZERS[cfg.policy.name](cfg)


def build_policy(policy_cfg, tokenizer, init: str | None = None, env_cfg=None, progress=None):
    """The policy from `init` (default policy_cfg.init): for TinyAgent rl_base (the starting policy of
    env_cfg's env, default the edit menu), scratch or a checkpoint path; for Qwen3 pretrained or a
    checkpoint path. `progress` (console.PhaseProgress) shows a long build, such as the RL base's."""
    return POLICIES[policy_cfg.name](policy_cfg, tokenizer, init or policy_cfg.init, env_cfg, progress)
