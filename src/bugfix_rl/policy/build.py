"""Policy registry: config -> tokenizer and model (TinyAgent; Qwen3 through transformers, policy/qwen3.py).

policy.init=rl_base, TinyAgent's RL base, is a recipe above this floor: recipes/starting_policy.py builds
the policy a run starts from, and comes here for every other init."""

from __future__ import annotations

from bugfix_rl.checkpoint import CheckpointError, load_checkpoint, load_model_state
from bugfix_rl.config import PolicyConfig
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.tiny import COPY_FIELDS, architecture, new_tiny_agent
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


def _tiny_agent(policy_cfg, tokenizer: Tokenizer, init: str):
    """A TinyAgent from `init`: scratch or a checkpoint path (rl_base: recipes/starting_policy.py)."""
    if init == "rl_base":
        raise ValueError("policy.init=rl_base is built by a recipe: recipes.starting_policy.build_starting_policy")
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


def _qwen3(policy_cfg, tokenizer, init: str):
    """A Hugging Face Qwen3 from policy.model (init 'pretrained'), or with a checkpoint's weights."""
    from bugfix_rl.policy.qwen3 import build_qwen3

    return build_qwen3(policy_cfg, tokenizer, init)


# policy.name -> (cfg -> tokenizer, (policy_cfg, tokenizer, init) -> model)
TOKENIZERS = Registry("policy", {"tiny": _word_tokenizer, "qwen3": _chat_tokenizer})
POLICIES = Registry("policy", {"tiny": _tiny_agent, "qwen3": _qwen3})
# The cheapest init that builds a policy's architecture, for a replica whose weights are published to it
# (rollout workers): TinyAgent's random init, the chat model's own pretrained weights.
REPLICA_INIT = Registry("policy", {"tiny": "scratch", "qwen3": "pretrained"})


def build_tokenizer_for(cfg):
    """The policy's tokenizer (the word tokenizer for TinyAgent, the model's own for a chat model)."""
    return TOKENIZERS[cfg.policy.name](cfg)


def build_policy(policy_cfg, tokenizer, init: str | None = None):
    """The policy from `init` (default policy_cfg.init): for TinyAgent scratch or a checkpoint path; for
    Qwen3 pretrained or a checkpoint path. TinyAgent's rl_base is recipes.starting_policy's."""
    return POLICIES[policy_cfg.name](policy_cfg, tokenizer, init or policy_cfg.init)
