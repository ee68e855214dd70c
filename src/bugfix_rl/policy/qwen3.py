"""Qwen3 (`policy=qwen3`): a Hugging Face causal LM and its tokenizer behind the hooks the generic
pipeline calls, so the same trainer runs it and TinyAgent:

- `kind = "chat"`: the rollout samples its episodes as batched token-in/token-out chat episodes
  (rollout/sampler.EPISODE_SAMPLERS -> rollout/chat_sampler.py), sampler log-probs recorded per token,
  and the recipes play the oracle for it in chat tool calls (recipes/demonstrations.ORACLE_EPISODES);
- `token_logprobs(ids, temperature, mask, with_entropy_grad)`: the memory-frugal trainer pass, hidden
  states from the base model and the LM head only at the positions where mask is 1 (policy tokens),
  so a [B, T, V] logits tensor never exists; entropy at those positions only (0 elsewhere);
- `structural_policy_mask(trajectory)`: the preflight's mask from token structure alone;
- `make_optimizer(lr)`: AdamW without weight decay (the book's setting).

Loading is offline unless `policy.allow_download`: `policy.model` is a local directory or a hub id
already in the HF cache. At construction the token path is checked against the chat template for both
envs' tool schemas (policy/chat_template.py) and a mismatch stops the run with one error.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn as nn

from bugfix_rl.checkpoint import CheckpointError
from bugfix_rl.policy.chat_template import ChatTokenPath, check_token_path
from bugfix_rl.policy.entropy import entropy_from_logits
from bugfix_rl.types import LogProbs

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class ModelNotFoundError(CheckpointError):
    """policy.model is neither a local directory nor (offline) in the HF cache; one-line message."""


@dataclass(frozen=True)
class ChatTokenizer:
    """The word-tokenizer attributes the generic code reads (pad id for collate, vocab size for the
    preflight's padding noise, words for checkpoint metadata), over a Hugging Face tokenizer."""

    hf: object

    @property
    def pad_id(self) -> int:
        pad = self.hf.pad_token_id
        return pad if pad is not None else self.hf.convert_tokens_to_ids("<|endoftext|>")

    @property
    def bos_id(self) -> int | None:
        return self.hf.bos_token_id

    @property
    def end_of_action_id(self) -> int:
        return self.hf.convert_tokens_to_ids("<|im_end|>")

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    @cached_property
    def words(self) -> tuple[str, ...]:
        return tuple(self.hf.convert_ids_to_tokens(list(range(len(self.hf)))))

    @cached_property
    def path(self) -> ChatTokenPath:
        return ChatTokenPath(self.hf)

    def encode(self, text: str) -> list[int]:
        """Plain text: a control token's text (`<|im_end|>`, `<tool_call>`, ...) gives its characters' ids."""
        return self.path.encode_plain(text)

    def decode(self, ids) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _missing(policy_cfg, error: Exception) -> ModelNotFoundError:
    where = "" if policy_cfg.allow_download else " (offline: set policy.allow_download=true to fetch it)"
    return ModelNotFoundError(f"policy.model={policy_cfg.model!r} is not a local model directory nor in the "
                              f"Hugging Face cache{where}: {str(error).splitlines()[0][:160]}")


def load_chat_tokenizer(policy_cfg) -> ChatTokenizer:
    from transformers import AutoTokenizer

    if not policy_cfg.model:
        raise ModelNotFoundError("policy=qwen3 needs policy.model=<local directory or cached hub id, e.g. "
                                 "Qwen/Qwen3-0.6B>")
    try:
        hf = AutoTokenizer.from_pretrained(policy_cfg.model, local_files_only=not policy_cfg.allow_download)
    except (OSError, ValueError) as error:
        raise _missing(policy_cfg, error) from None
    return ChatTokenizer(hf)


PACKED_GQA = "sdpa_packed_gqa"


def sdpa_packed_gqa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """HF's SDPA attention, except that a one-token query with grouped kv heads always runs on the kv heads.

    transformers 5.x does this (`pack_gqa`) only outside torch.compile; compiled, it repeats the kv heads
    (`repeat_kv`), which copies the whole cache at every decode step. Here the query's heads of one kv
    group become that group's query rows: [B, H, 1, D] -> [B, H_kv, H/H_kv, D], the mask [B, 1, 1, S]
    broadcasts over them, and the cache is read once, the arithmetic of the eager path. Anything else
    (prefill, the trainer's pass) goes to HF's sdpa_attention_forward unchanged."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or groups == 1 or (attention_mask is not None and attention_mask.shape[1] != 1):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    batch, heads, _, dim = query.shape
    out = torch.nn.functional.scaled_dot_product_attention(
        query.reshape(batch, heads // groups, groups, dim), key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def register_attention() -> None:
    """Make `sdpa_packed_gqa` an attn_implementation (with the sdpa masks), once per process."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    if PACKED_GQA not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionInterface.register(PACKED_GQA, sdpa_packed_gqa)
        AttentionMaskInterface.register(PACKED_GQA, sdpa_mask)


def load_causal_lm(policy_cfg):
    import transformers
    from transformers import AutoModelForCausalLM

    dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    extra = {}
    if getattr(policy_cfg, "attn_implementation", ""):
        if policy_cfg.attn_implementation == PACKED_GQA:
            register_attention()
        extra["attn_implementation"] = policy_cfg.attn_implementation
    try:
        lm = AutoModelForCausalLM.from_pretrained(policy_cfg.model, local_files_only=not policy_cfg.allow_download,
                                                  **{dtype_key: DTYPES[policy_cfg.dtype]}, **extra)
    except (OSError, ValueError) as error:
        raise _missing(policy_cfg, error) from None
    return lm.to("cuda" if torch.cuda.is_available() else "cpu")


def policy_position_logprobs(hidden: torch.Tensor, head: nn.Module, ids: torch.Tensor, select: torch.Tensor,
                             temperature: float, with_entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(ids[t+1]) and entropy at the selected positions, LM head applied there only.

    hidden [B, T, H] (base model output for ids [B, T]); select [B, T-1] bool, aligned with ids[:, 1:].
    Returns logp, entropy [B, T-1] float32, 0 where not selected (entropy detached unless asked)."""
    rows, cols = select.nonzero(as_tuple=True)  # N selected positions
    logits = head(hidden[rows, cols]).float() / temperature  # [N, V]
    logp_all = torch.log_softmax(logits, dim=-1)
    token_logp = logp_all.gather(1, ids[rows, cols + 1, None]).squeeze(1)  # [N]
    if with_entropy_grad:
        entropy = entropy_from_logits(logits)
    else:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    shape = select.shape
    zeros = torch.zeros(shape, dtype=torch.float32, device=hidden.device)
    return zeros.index_put((rows, cols), token_logp), zeros.index_put((rows, cols), entropy)


class FullLogits(nn.Module):
    """A causal LM without the policy's frugal hook, so token_logprobs takes its generic full-logits
    path: the reference the frugal update is checked and measured against."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm(input_ids=ids, use_cache=False).logits.float()


class QwenPolicy(nn.Module):
    """A causal LM with its chat token path. `cfg` is the PolicyConfig (max_len, max_new_tokens, ...)."""

    kind = "chat"  # rollout/sampler.policy_kind: the chat sampler, and the oracle in chat tool calls

    def __init__(self, lm, tokenizer: ChatTokenizer, cfg):
        super().__init__()
        self.lm, self.cfg = lm, cfg
        self.path = ChatTokenPath(tokenizer.hf)
        if len(tokenizer.hf) > lm.get_input_embeddings().num_embeddings:
            raise ModelNotFoundError(f"tokenizer of {cfg.model!r} has {len(tokenizer.hf)} tokens, more than the "
                                     f"model's {lm.get_input_embeddings().num_embeddings} embeddings")
        from bugfix_rl.gym.chat import CHAT_FRONT_ENDS

        for front_end in CHAT_FRONT_ENDS.values():  # one clear error at start-up, never a silent drift
            check_token_path(self.path, front_end.tools)
        if cfg.gradient_checkpointing:
            if hasattr(lm, "activation_checkpointing_enable"):  # transformers >= 5.2x; the old name warns
                lm.activation_checkpointing_enable({"use_reentrant": False})
            else:
                lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            lm.config.use_cache = False  # the sampler asks for its cache explicitly
        lm.train()  # dropout is 0 in Qwen3; train mode is what turns gradient checkpointing on
        # policy.generation_cache=static: the sampler's StaticDecoder, built at the first sampling and kept
        # here across steps (rollout/chat_sampler.static_decoder_of)
        self.static_decoder = None

    @property
    def device(self) -> torch.device:
        return next(self.lm.parameters()).device

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Plain full logits [B, T, V] (the reference path the frugal one is tested against)."""
        return self.lm(input_ids=ids.to(self.device), use_cache=False).logits.float().to(ids.device)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def token_logprobs(self, ids: torch.Tensor, temperature: float, mask: torch.Tensor | None = None,
                       with_entropy_grad: bool = False):
        """The trainer's log-probs of ids[:, 1:] [B, T-1], on ids' device; LM head at mask > 0 only."""
        x = ids.to(self.device)
        select = (torch.ones(x.shape[0], x.shape[1] - 1, dtype=torch.bool, device=self.device) if mask is None
                  else mask.to(self.device) > 0)
        hidden = self.lm.get_decoder()(input_ids=x, use_cache=False).last_hidden_state  # [B, T, H]
        logp, entropy = policy_position_logprobs(hidden, self.lm.get_output_embeddings(), x, select, temperature,
                                                 with_entropy_grad)
        return LogProbs(logp.to(ids.device), entropy.to(ids.device))

    def shard_units(self) -> list[nn.Module]:
        """The modules FSDP2 shards one by one (algo/data_parallel.py): the decoder layers."""
        return list(self.lm.get_decoder().layers)

    def structural_policy_mask(self, trajectory) -> list[bool]:
        return self.path.policy_mask(trajectory.ids, self.cfg.max_new_tokens)

    def make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=0.0)


def build_qwen3(policy_cfg, tokenizer: ChatTokenizer, init: str | None = None) -> QwenPolicy:
    """The pretrained model (init 'pretrained'), or it with the weights of one of our checkpoints."""
    from bugfix_rl.checkpoint import load_checkpoint, load_model_state

    policy = QwenPolicy(load_causal_lm(policy_cfg), tokenizer, policy_cfg)
    init = init or policy_cfg.init
    if init != "pretrained":
        tensors, _ = load_checkpoint(init)
        load_model_state(policy, tensors, init)
    return policy
