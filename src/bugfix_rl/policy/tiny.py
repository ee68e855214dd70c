"""TinyAgent: a ~160k-parameter decoder-only transformer over the gym's word vocabulary.

Two forward paths share the weights: `forward` (full causal pass over right-padded sequences, for the
update) and `forward_step` (incremental pass with a KV cache, for batched sampling). In a sampling step
every row feeds its own number of new tokens (one sampled token, or a sampled end-of-action token
followed by the observation), so rows sit at different positions; without a copy head the fed tokens
go through the layers flat, without the padding of the [rows, widest feed] grid (a capstone batch feeds
2.3k tokens in a grid of 16k cells; the copy head computes the whole grid), the cache is written per row
at its own offset, and attention runs per row under a float mask that hides what a row must not see.

With `copy_head` (policy/copy_head.py, the tools env) both paths return the log-probs of a
pointer-generator mixture instead of plain logits: downstream code applies log_softmax(x / T) to
either, so the sampler and the trainer see one distribution. With `shared_identifier_embedding`,
every operand-name token enters the network through one shared input vector: the model tells names
apart only by where they occur, so a name never seen in training looks like any other name, and the
copy head's exact-id match features carry which one to repeat.

An episode's out-of-vocabulary slots (policy/tokenizer.py) follow the words' ids and have no weights:
they enter through the shared identifier vector (a zero vector without it) and get no vocabulary
probability (a floor logit, SLOT_LOGIT), so only the copy head writes one, by pointing at it. The
words' weights, their logits and so every number of an episode without such words are what they
were before the slots existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from bugfix_rl.config import PolicyConfig
from bugfix_rl.policy.copy_head import CopyHead, ResumeState, advance_resume
from bugfix_rl.policy.tokenizer import Tokenizer, edit_marker_ids, identifier_ids

# The vocabulary logit of every out-of-vocabulary slot: exp underflows to exactly 0 against any word's,
# so no probability goes there, while log-probs, entropies and their gradients stay finite (-inf
# would give 0 * inf).
SLOT_LOGIT = -1e4


@dataclass
class TinyAgentConfig:
    """Architecture of TinyAgent (vocab_size is set from the tokenizer). The defaults are the config
    schema's `policy.*` (config.PolicyConfig, where each field is explained), written once there."""

    d_model: int = PolicyConfig.d_model
    n_layers: int = PolicyConfig.n_layers
    n_heads: int = PolicyConfig.n_heads
    d_ff: int = PolicyConfig.d_ff
    max_len: int = PolicyConfig.max_len
    copy_head: bool = PolicyConfig.copy_head
    copy_dim: int = PolicyConfig.copy_dim
    copy_ngram: int = PolicyConfig.copy_ngram
    copy_softcap: float = PolicyConfig.copy_softcap
    copy_suffix_match: bool = PolicyConfig.copy_suffix_match
    copy_edit_align: bool = PolicyConfig.copy_edit_align
    copy_edit_resume: bool = PolicyConfig.copy_edit_resume
    copy_resume_cut: bool = PolicyConfig.copy_resume_cut
    copy_resume_next: bool = PolicyConfig.copy_resume_next
    copy_lookup: bool = PolicyConfig.copy_lookup
    copy_lookup_feed: bool = PolicyConfig.copy_lookup_feed
    shared_identifier_embedding: bool = PolicyConfig.shared_identifier_embedding

    @property
    def reads_edit_markers(self) -> bool:
        """Whether the copy head needs the ids of `old`, `new` and the call ends."""
        return self.copy_edit_align or self.copy_edit_resume or self.copy_lookup


class KVCache:
    """Per-layer keys/values [B, H, capacity, head_dim] and each row's filled length [B]; with a copy
    head also the copy keys [B, capacity, copy_dim], the token ids [B, capacity] (-1 = empty) and the
    copy pointer's scan state (copy_head.ResumeState, read by copy_edit_resume and copy_lookup)."""

    def __init__(self, n_layers: int, batch: int, n_heads: int, capacity: int, head_dim: int, copy_dim: int = 0):
        shape = (batch, n_heads, capacity, head_dim)
        self.keys = [torch.zeros(shape) for _ in range(n_layers)]
        self.values = [torch.zeros(shape) for _ in range(n_layers)]
        self.lengths = torch.zeros(batch, dtype=torch.long)
        self.copy_keys = torch.zeros(batch, capacity, copy_dim) if copy_dim else None
        self.ids = torch.full((batch, capacity), -1, dtype=torch.long) if copy_dim else None
        self.resume = ResumeState.empty(batch) if copy_dim else None


class Block(nn.Module):
    def __init__(self, cfg: TinyAgentConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))

    def _heads(self, x: torch.Tensor):
        """x [..., C] -> q, k, v, each [..., H, hd]."""
        C = x.shape[-1]
        return (t.unflatten(-1, (self.n_heads, C // self.n_heads)) for t in self.qkv(self.ln1(x)).split(C, dim=-1))

    def _finish(self, x: torch.Tensor, merged: torch.Tensor) -> torch.Tensor:
        """x [..., C] and the attention output with its heads merged [..., C] -> the block's output."""
        x = x + self.proj(merged)
        return x + self.mlp(self.ln2(x))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, C]; attn_mask [B, 1, T, T] bool (True: may attend), None: causal."""
        B, T, C = x.shape
        q, k, v = (t.transpose(1, 2) for t in self._heads(x))  # (B, H, T, hd) each
        if attn_mask is None:
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self._finish(x, attn.transpose(1, 2).reshape(B, T, C))

    def forward_cached(self, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, slots: "StepSlots",
                       mask: torch.Tensor, used: int) -> torch.Tensor:
        """One sampling step over the computed token slots only: x [N, C] flat (slots.grid's True
        cells in row-major order); keys, values [B, H, capacity, hd] (this layer's cache, written at
        each slot's row and position); mask [A, 1, q, used] float, for the rows attention runs on
        (slots.attending; all B when None)."""
        N, C = x.shape
        q, k, v = self._heads(x)  # [N, H, hd] each
        keys[slots.rows, :, slots.write_at] = k
        values[slots.rows, :, slots.write_at] = v
        grid, past_keys, past_values = slots.grid, keys[:, :, :used], values[:, :, :used]
        if slots.attending is not None:  # a row's attention reads only its own row: the others are skipped
            grid, past_keys, past_values = (t[slots.attending] for t in (grid, past_keys, past_values))
        queries = q.new_zeros(*grid.shape, *q.shape[1:])  # [A, q, H, hd]: attention runs per row
        queries[grid] = q
        attn = F.scaled_dot_product_attention(queries.transpose(1, 2), past_keys, past_values,
                                              attn_mask=mask)  # [A, H, q, hd]
        return self._finish(x, attn.transpose(1, 2)[grid].reshape(N, C))


@dataclass
class StepSlots:
    """Which cells of a sampling step's [B, q] grid of fed tokens are computed, and where they go.

    grid [B, q] bool; rows, write_at [N] long: the row and cache position of each computed cell, in
    grid order (N = grid.sum()); attending [A] long: the rows that have a computed cell, the only ones
    whose attention is computed (None: all B rows)."""

    grid: torch.Tensor
    rows: torch.Tensor
    write_at: torch.Tensor
    attending: torch.Tensor | None = None


class TinyAgent(nn.Module):
    def __init__(self, vocab_size: int, cfg: TinyAgentConfig, identifier_ids: list[int] | None = None,
                 edit_markers: tuple[int, int, list[int]] | None = None, oov_slots: int = 0):
        """vocab_size: the words (ids with an embedding); oov_slots: the per-episode slot ids after them
        (module doc); identifier_ids: the vocabulary ids of operand names (used with
        shared_identifier_embedding); edit_markers: the ids of `old`, `new` and the call-ending tokens
        (used with copy_edit_align, copy_edit_resume and copy_lookup)."""
        super().__init__()
        if cfg.reads_edit_markers and edit_markers is None:
            raise ValueError("copy_edit_align / copy_edit_resume / copy_lookup need the vocabulary's ids of old, new "
                             "and the call ends")
        self.cfg, self.oov_slots = cfg, oov_slots
        self.vocab_size = vocab_size + oov_slots  # ids read and written: the words, then the slots
        self.token_embedding = nn.Embedding(vocab_size, cfg.d_model)
        self.position_embedding = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.copy = (CopyHead(cfg.d_model, cfg.copy_dim, cfg.copy_ngram, cfg.copy_softcap, cfg.copy_suffix_match,
                              edit_markers, align=cfg.copy_edit_align, resume=cfg.copy_edit_resume,
                              resume_cut=cfg.copy_resume_cut, resume_next=cfg.copy_resume_next,
                              lookup=cfg.copy_lookup, lookup_feed=cfg.copy_lookup_feed)
                     if cfg.copy_head else None)
        if cfg.shared_identifier_embedding:
            if not identifier_ids:
                raise ValueError("shared_identifier_embedding needs the vocabulary's identifier ids")
            self.identifier_embedding = nn.Parameter(torch.zeros(cfg.d_model))
            is_identifier = torch.zeros(vocab_size + oov_slots, dtype=torch.bool)
            is_identifier[torch.tensor(identifier_ids)] = True
            is_identifier[vocab_size:] = True  # an episode's new word enters as a name does
            self.register_buffer("is_identifier", is_identifier, persistent=False)
        self.apply(self._init)
        if cfg.shared_identifier_embedding:
            nn.init.normal_(self.identifier_embedding, std=0.02)

    @staticmethod
    def _init(module: nn.Module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def takes_packed_rows(self) -> bool:
        """Whether forward takes packed rows (positions and segments): not with a copy head."""
        return self.copy is None

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self._vocab_logits(self.ln_f(x))

    def _vocab_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., C] (after ln_f) -> [..., vocab_size]: the tied head's word logits, then SLOT_LOGIT
        for each slot."""
        logits = hidden @ self.token_embedding.weight.T
        if not self.oov_slots:
            return logits
        return torch.cat([logits, logits.new_full((*logits.shape[:-1], self.oov_slots), SLOT_LOGIT)], -1)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Input token embeddings [*ids.shape, C]; operand names (and slots) share one vector when
        configured; without it a slot enters as zeros."""
        words = self.token_embedding.num_embeddings
        x = self.token_embedding(ids.clamp(max=words - 1) if self.oov_slots else ids)
        if self.cfg.shared_identifier_embedding:
            x = torch.where(self.is_identifier[ids][..., None], self.identifier_embedding, x)
        elif self.oov_slots:
            x = x.masked_fill((ids >= words)[..., None], 0.0)
        return x

    def forward(self, ids: torch.Tensor, positions: torch.Tensor | None = None,
                segments: torch.Tensor | None = None, words_only: bool = False) -> torch.Tensor:
        """ids [B, T] right-padded -> logits [B, T, V] (padding never leaks backwards: causal).

        words_only (no copy head): the words' logits alone [B, T, len(words)], without the slots'
        SLOT_LOGIT columns, which no softmax gives any probability (the update's narrow pass,
        algo/update.token_logprobs); the same matrix product, so the same floats.

        Packed rows (several sequences laid end to end, algo/sft.py): positions [B, T] each token's
        position in its own sequence and segments [B, T] which sequence it belongs to; a token attends
        only to earlier tokens of its own segment, so each sequence gets the logits it gets alone.
        With a copy head: the mixture's log-probs [B, T, V] (a valid input to log_softmax); it reads
        whole sequences, so it takes no packed rows."""
        T = ids.shape[1]
        if positions is None:
            positions = torch.arange(T, device=ids.device)
        attn_mask = None
        if segments is not None:
            if self.copy is not None:
                raise ValueError("a TinyAgent with a copy head takes whole sequences, not packed rows")
            causal = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril()
            attn_mask = ((segments[:, :, None] == segments[:, None, :]) & causal)[:, None]  # [B, 1, T, T]
        x = self._embed(ids) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x, attn_mask)
        if self.copy is None:
            hidden = self.ln_f(x)
            return hidden @ self.token_embedding.weight.T if words_only else self._vocab_logits(hidden)
        if words_only:
            raise ValueError("a copy head writes slots: its log-probs take the whole vocabulary")
        hidden = self.ln_f(x)
        return self.copy.mixture_full(hidden, self._vocab_logits, ids, self._embed)

    def new_cache(self, batch: int) -> KVCache:
        cfg = self.cfg
        # one slot past max_len, which no real token uses: with a copy head forward_step computes padded
        # grid cells too, and those that would lie past the cache write there
        return KVCache(cfg.n_layers, batch, cfg.n_heads, cfg.max_len + 1, cfg.d_model // cfg.n_heads,
                       cfg.copy_dim if cfg.copy_head else 0)

    @staticmethod
    def _attending(grid: torch.Tensor) -> torch.Tensor | None:
        """The rows of grid [B, q] with a computed cell when some row has none, else None (all rows).

        Attention runs for those rows only: ended episodes feed nothing, about half of a capstone batch's
        row-steps. SDPA computes each row on its own, so the fed rows get the bytes a pass over all rows
        gives them (tests/test_tiny_sampling.py)."""
        fed = grid.any(1)
        return None if bool(fed.all()) else fed.nonzero().squeeze(1)

    @torch.no_grad()
    def forward_step(self, ids: torch.Tensor, n_new: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Feed ids [B, q] (row b's first n_new[b] are real) -> logits at each row's last real token [B, V].

        Rows with n_new == 0 feed padding and keep their length; their logits are meaningless.
        """
        B, q = ids.shape
        cfg = self.cfg
        offsets = torch.arange(q)
        positions = cache.lengths[:, None] + offsets  # [B, q]
        x = self._embed(ids) + self.position_embedding(positions.clamp(max=cfg.max_len - 1))
        used = int((cache.lengths + n_new).max().clamp(min=1))
        # query i of row b sees keys 0..lengths[b]+i (its own past and itself)
        visible = torch.arange(used)[None, None, :] <= positions[:, :, None]  # [B, q, used]
        mask = torch.zeros(B, 1, q, used).masked_fill_(~visible[:, None], float("-inf"))
        real = offsets[None, :] < n_new[:, None]  # [B, q]
        # Only the fed tokens are computed (2.3k of 16k grid cells in a capstone batch). The copy head's
        # sampling computes every cell, padding included, as it always has: the tools numbers in the README
        # and docs/TOOLS.md come from that arithmetic (a row's values differ in the last bits with the
        # number of rows computed), and its steps are the sandbox's time anyway.
        grid = real if self.copy is None else torch.ones_like(real)
        # With a copy head, a padded cell of a row that feeds fewer tokens (or none: an ended episode near
        # the context's end) may lie past max_len when another row feeds a long observation: it writes to
        # the spare slot max_len, which no real token uses (real positions stay below max_len) and no query
        # attends.
        slots = StepSlots(grid, torch.arange(B)[:, None].expand(B, q)[grid], positions.clamp(max=cfg.max_len)[grid])
        slots.attending = self._attending(grid)
        if slots.attending is not None:
            mask = mask[slots.attending]
        x = x[grid]  # [N, C]
        for layer, block in enumerate(self.blocks):
            x = block.forward_cached(x, cache.keys[layer], cache.values[layer], slots, mask, used)
        if self.copy is None:
            cache.lengths += n_new
            if not len(x):  # no row fed anything: every row's logits are meaningless
                return self._logits(x.new_zeros(B, x.shape[-1]))
            # each row's last fed token in x's flat order (a row that fed nothing: a neighbour's; meaningless)
            return self._logits(x[(real.sum(1).cumsum(0) - 1).clamp(min=0)])
        last = (n_new - 1).clamp(min=0)
        hidden = self.ln_f(x.view(B, q, -1))  # [B, q, C]
        rows, at = torch.arange(B)[:, None].expand(B, q)[real], positions[real]
        cache.ids[rows, at] = ids[real]
        cache.copy_keys[rows, at] = self.copy.key(hidden[real])
        if self.copy.reads_pointer:  # the pointer reads the fed tokens in order, as the full pass does
            for i in range(q):
                advance_resume(cache.resume, ids[:, i], positions[:, i], cache.ids, real[:, i], self.copy.edit_markers)
        cache.lengths += n_new
        last_hidden = hidden[torch.arange(B), last]  # [B, C]
        return self.copy.mixture_step(last_hidden, self._vocab_logits, cache, self._embed)


# ---------------------------------------------------------------- from the config

COPY_FIELDS = ("copy_head", "copy_dim", "copy_ngram", "copy_softcap", "copy_suffix_match", "copy_edit_align",
               "copy_edit_resume", "copy_resume_cut", "copy_resume_next", "copy_lookup", "copy_lookup_feed",
               "shared_identifier_embedding")


def architecture(policy_cfg) -> TinyAgentConfig:
    return TinyAgentConfig(policy_cfg.d_model, policy_cfg.n_layers, policy_cfg.n_heads, policy_cfg.d_ff,
                           policy_cfg.max_len, **{name: getattr(policy_cfg, name) for name in COPY_FIELDS})


def new_tiny_agent(tokenizer: Tokenizer, arch: TinyAgentConfig) -> TinyAgent:
    """A freshly initialised TinyAgent for this vocabulary (identifier ids filled in when needed)."""
    ids = identifier_ids(tokenizer) if arch.shared_identifier_embedding else None
    markers = edit_marker_ids(tokenizer) if arch.reads_edit_markers else None
    return TinyAgent(len(tokenizer.words), arch, identifier_ids=ids, edit_markers=markers,
                     oov_slots=tokenizer.oov_slots)
