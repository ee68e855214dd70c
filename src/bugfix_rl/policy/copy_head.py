"""TinyAgent's copy head: a pointer-generator output over the context tokens (See et al., 2017).

At the position that predicts token t+1, with final hidden state h_t:

    P(w) = g * softmax(logits)[w] + (1 - g) * sum_{j <= t : ids_j = w} a_j
    g    = sigmoid(gate(h_t))
    a_j  = softmax_j( c * tanh(query(h_t) . key(h_j) / (sqrt(d) * c))  +  sum_n w_n [ids_{j-n} = ids_{t+1-n}] )

The match features (n = 1..copy_ngram) say "the token before position j is the token just emitted":
they are exact-id comparisons, so copying the continuation of a line works for a name the model never
saw in training. The learned score can be soft-capped at +-c (`copy_softcap`, as Gemma 2 caps its
attention logits): uncapped, RL grew it to ~20 and it learned that a literal ends the line, outvoting
an exact 3-gram match (~9.6) and breaking the copy of `return min ( 0 , ...` in a held-out task. At
c = 6 a full match is hard to outvote while the learned term still picks among unmatched positions
(writing new_string); at c = 3 it is too weak for that and RL learned far more slowly.

With `copy_edit_align`, one more feature, w_align [j = aligned(t)], scores the position of the Edit's
old_string token that lines up with the new_string token being written: writing the k-th token after
`new`, aligned(t) is the k-th token after the call's `old` (while it lies before `new`; no feature
before a call's `new`, after a `;`, or outside the agent's turn). new_string is old_string with a few
tokens changed, and where the change breaks the n-gram match (`max ( 0` after `min ( 0` was swapped
to `max (`: the 2-gram `max (` points at `max ( level`), the aligned position still says `0`.

With `copy_edit_resume`, one more feature, w_resume [j = pointer(t)], follows a copy pointer through
old_string while new_string is written: it starts at old_string's first token when `new` is emitted;
each emitted token equal to the pointed one advances it by one (a copy), one equal to the token after
it advances it by two (the pointed token was replaced or dropped), any other leaves it (an inserted
token, or the first of a replacement). Unlike the index alignment it survives insertions: writing
`range ( 0 , stop + 1 ,` after `old ... range ( 0 , stop , stride )`, the pointer is at `stride`,
where the suffix match has only the one-token match on `,` (as much after `0` as after `stop`). And
after a swap (`max (` for `min (`) it resynchronises at the next copied token.

With `copy_resume_cut`, while the pointer is active the match features look back only over the tokens
it confirmed as copies (the unbroken run of copied tokens ending at the last one, at least the last
token itself): after a swap (`max (` written for `min (`), the 2-gram `max (` matches `max ( level` in
the Read output and old_string, as much as the pointer and the 1-gram `(` point at `0`, and seed 1's
agent gave `0` probability 0.05 there. `max` was not copied, so only the 1-gram `(` counts.

With `copy_resume_next`, one more feature, w_next [j = pointer(t) + 1], where the last token was written in
place of the pointed one (neither a copy nor `new`): the pointer moves only once the token after a
replacement is copied, so right after `>=` is written for `>` it still points at `>` while `cutoff`
comes next. After an insertion the pointed token comes next, after a replacement the one after it;
the two learned weights (w_next starts at 0) and the learned score tell them apart.

With `copy_lookup`, a third term of the mixture writes one token chosen by exact rules, under a gate of
its own: the pointed old_string token in new_string, else the continuation of the longest matching run
(policy/copy_lookup.py). The features above decide which position the attention copies; the lookup's
token is not in that softmax, so no learned score can outvote it, only its gate.

Every consumer works on log P (the sampler samples from it, the trainer recomputes it, ratios, KL and
entropy use it), so token-in/token-out stays exact (docs/TOOLS.md, "What makes it learnable: a copy head").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from bugfix_rl.policy.copy_lookup import (fed_hidden, initial_kind_bias, lookup_mixture_log_probs, lookup_target,
                                         suffix_runs)


def mixture_log_probs(vocab_logits: torch.Tensor, gate_logit: torch.Tensor, attention: torch.Tensor,
                      context_ids: torch.Tensor) -> torch.Tensor:
    """log P of the pointer-generator mixture.

    vocab_logits [..., V]; gate_logit [...] (g = sigmoid); attention [..., J] (sums to 1 over J);
    context_ids [..., J] the token id at each attended position (entries with attention 0 may hold any
    valid id). Returns [..., V]. The copy term is -inf for ids absent from the context; the vocabulary
    term is always finite, so log P is finite everywhere and its gradient has no 0 * inf.
    """
    copy_p = torch.zeros_like(vocab_logits).scatter_add_(-1, context_ids, attention)  # [..., V]
    log_vocab = F.log_softmax(vocab_logits, dim=-1) + F.logsigmoid(gate_logit)[..., None]
    present = copy_p > 0
    log_copy = torch.where(present, copy_p.clamp_min(1e-38).log(), float("-inf"))
    return torch.logaddexp(log_vocab, log_copy + F.logsigmoid(-gate_logit)[..., None])


def match_scores(query_ids: torch.Tensor, candidate_prev_ids: torch.Tensor, weights: torch.Tensor,
                 suffix: bool = False, limit: torch.Tensor | None = None) -> torch.Tensor:
    """sum_n weights[n] * [query_ids[..., q, n] == candidate_prev_ids[..., j, n]] (offsets), or with
    suffix=True sum_n weights[n] * [the last n+1 query tokens all equal the candidate's n+1 predecessors].

    query_ids [..., Q, N] (the last N tokens before the prediction, most recent first; -2 = none);
    candidate_prev_ids [..., J, N] (the N tokens before each candidate, nearest first; -1 = none).
    limit [..., Q] (optional): at most this many of the last query tokens take part (n < limit).
    Returns [..., Q, J].

    Offsets count each position on its own, so `( 0 ,` half-matches `( level ,` (offsets 1 and 3):
    6.6 of a full match's 9.2 with the tools base's weights. A suffix match counts only an unbroken run
    back from the last token (prompt lookup decoding's rule), so that candidate gets 3.2."""
    total, run = 0, True
    for n in range(weights.shape[0]):  # one [..., Q, J] comparison at a time: no [..., Q, J, N] float tensor
        equal = query_ids[..., :, None, n] == candidate_prev_ids[..., None, :, n]
        run = run & equal if suffix else equal
        counted = run if limit is None else run & (limit > n)[..., None]
        total = total + weights[n] * counted
    return total


def edit_alignment(ids: torch.Tensor, old_id: int, new_id: int, end_ids: list[int]) -> torch.Tensor:
    """For each position t of ids [B, T], the position of old_string's k-th token when the token after t
    is new_string's k-th (k = t - position of the last `new`), else -1. [B, T] long.

    Active only after a call's `new` that follows its `old` with no end token (`;`, end of action or of
    observation) since `new`, and only while the aligned position lies before that `new`."""
    B, T = ids.shape
    position = torch.arange(T).expand(B, T)
    none = torch.full_like(position, -1)
    last_old = torch.where(ids == old_id, position, none).cummax(1).values  # [B, T]
    last_new = torch.where(ids == new_id, position, none).cummax(1).values
    last_end = torch.where(torch.isin(ids, torch.tensor(end_ids)), position, none).cummax(1).values
    target = last_old + 1 + (position - last_new)
    active = (last_old >= 0) & (last_new > last_old) & (last_new > last_end) & (target < last_new)
    return torch.where(active, target, none)


@dataclass
class ResumeState:
    """The copy pointer's scan state per row, each [B] long (-1 = none): the pointer, the positions of
    the last `old`, of the `new` that started the pointer, and of the last call-ending token; and how
    many tokens in a row up to the last one the pointer confirmed as copies (0 after `new` and after a
    token it did not)."""

    pointer: torch.Tensor
    last_old: torch.Tensor
    new_at: torch.Tensor
    last_end: torch.Tensor
    copied_run: torch.Tensor

    @classmethod
    def empty(cls, batch: int) -> "ResumeState":
        return cls(*(torch.full((batch,), -1, dtype=torch.long) for _ in range(5)))

    def current(self) -> torch.Tensor:
        """[B] the pointed old_string position, or -1 when the pointer is not inside old_string."""
        return torch.where((self.pointer >= 0) & (self.pointer < self.new_at), self.pointer, -1)

    def current_run(self) -> torch.Tensor:
        """[B] copied_run where the pointer is inside old_string, else -1."""
        return torch.where(self.current() >= 0, self.copied_run, -1)

    def exhausted(self) -> torch.Tensor:
        """[B] bool: inside a new_string whose pointer has passed old_string's end (until the call ends,
        another `old` or `new`)."""
        return (self.pointer >= 0) & (self.pointer >= self.new_at)


def advance_resume(state: ResumeState, token: torch.Tensor, t, seq: torch.Tensor, valid: torch.Tensor,
                   markers: tuple[int, int, list[int]]) -> None:
    """Read one token per row into `state` (in place; rows where `valid` is False keep theirs).

    token [B] sits at position t (an int or [B]) of seq [B, J], which holds every earlier token."""
    old_id, new_id, end_ids = markers
    rows = torch.arange(seq.shape[0])
    inside = (state.pointer >= 0) & (state.pointer < state.new_at)
    here = seq[rows, state.pointer.clamp(0, seq.shape[1] - 1)]
    after = seq[rows, (state.pointer + 1).clamp(0, seq.shape[1] - 1)]
    copied = inside & (token == here)
    skipped = inside & ~copied & (state.pointer + 1 < state.new_at) & (token == after)
    pointer = torch.where(copied, state.pointer + 1, torch.where(skipped, state.pointer + 2, state.pointer))
    copied_run = torch.where(copied | skipped, state.copied_run + 1, 0)
    is_old, is_end = token == old_id, torch.isin(token, torch.tensor(end_ids))
    last_old = torch.where(is_old, t, state.last_old)
    last_end = torch.where(is_end, t, state.last_end)
    pointer = torch.where(is_end | is_old, -1, pointer)
    starts = (token == new_id) & (last_old >= 0) & (last_end < last_old)
    pointer = torch.where(starts, last_old + 1, pointer)
    new_at = torch.where(starts, t, state.new_at)
    copied_run = torch.where(starts, 0, copied_run)
    for name, value in (("pointer", pointer), ("last_old", last_old), ("new_at", new_at), ("last_end", last_end),
                        ("copied_run", copied_run)):
        setattr(state, name, torch.where(valid, value, getattr(state, name)))


def edit_resume_pointer(ids: torch.Tensor, old_id: int, new_id: int, end_ids: list[int],
                        with_exhausted: bool = False):
    """For each position t of ids [B, T], the old_string position the copy pointer holds after reading
    ids[:, : t + 1] (module doc), else -1; and the run of copied tokens up to t it has confirmed
    (ResumeState.copied_run), -1 where the pointer is not active. Two [B, T] long tensors; with
    with_exhausted a third, [B, T] bool: where the pointer has passed old_string's end
    (ResumeState.exhausted).

    Active from a call's `new` that follows its `old` with no end token (`;`, end of action or of
    observation) between them, until an end token, another `old` or `new`, or the pointer leaving
    old_string. The same values as reading every token with `advance_resume` (as the KV cache does),
    computed only over each new_string: a scan over all T positions cost the tools base build a minute."""
    B, T = ids.shape
    starts = (ids == new_id).nonzero().tolist()
    pointers = torch.full((B, T), -1, dtype=torch.long)
    runs = torch.full((B, T), -1, dtype=torch.long)
    exhausted = torch.zeros((B, T), dtype=torch.bool)
    if not starts:
        return (pointers, runs, exhausted) if with_exhausted else (pointers, runs)
    rows, ends = ids.tolist(), set(end_ids)
    at_b, at_t, value, run_value, past_b, past_t = [], [], [], [], [], []
    for b, new_at in starts:
        row, old_at = rows[b], new_at - 1
        while old_at >= 0 and row[old_at] != old_id and row[old_at] not in ends:
            old_at -= 1
        if old_at < 0 or row[old_at] != old_id:
            continue  # no `old` in this call
        pointer, run, t = old_at + 1, 0, new_at
        while pointer < new_at:
            at_b.append(b), at_t.append(t), value.append(pointer), run_value.append(run)
            t += 1
            if t >= T or row[t] in ends or row[t] in (old_id, new_id):
                break  # another `new` starts its own pointer
            if row[t] == row[pointer]:
                pointer, run = pointer + 1, run + 1
            elif pointer + 1 < new_at and row[t] == row[pointer + 1]:
                pointer, run = pointer + 2, run + 1
            else:
                run = 0
        else:  # the pointer left old_string at t (at `new` itself for an empty old_string): it stays
            # past its end until the call ends, another `old` or `new`
            while with_exhausted:
                past_b.append(b), past_t.append(t)
                t += 1
                if t >= T or row[t] in ends or row[t] in (old_id, new_id):
                    break
    index = (torch.tensor(at_b, dtype=torch.long), torch.tensor(at_t, dtype=torch.long))
    pointers[index] = torch.tensor(value, dtype=torch.long)
    runs[index] = torch.tensor(run_value, dtype=torch.long)
    if not with_exhausted:
        return pointers, runs
    exhausted[torch.tensor(past_b, dtype=torch.long), torch.tensor(past_t, dtype=torch.long)] = True
    return pointers, runs, exhausted


def resume_next_target(ids: torch.Tensor, pointer: torch.Tensor, copied_run: torch.Tensor, last: torch.Tensor,
                       new_id: int) -> torch.Tensor:
    """copy_resume_next: the old_string position after the pointed one, where the last token (ids at
    `last`) was written in place of the pointed one (a replacement: not a copy, not `new`), else -1.

    ids [B, J]; pointer, copied_run, last: [B, ...] (the same shape). The pointer moves only once the
    token after a replacement is copied, so right after `>=` is written for `>` it still points at `>`,
    while `cutoff` comes next."""
    J = ids.shape[-1]
    after = (pointer + 1).clamp(0, J - 1)
    rows = torch.arange(ids.shape[0]).view(-1, *([1] * (pointer.dim() - 1))).expand_as(pointer)
    replaced = (pointer >= 0) & (copied_run == 0) & (ids[rows, last.clamp(0, J - 1)] != new_id)
    return torch.where(replaced & (ids[rows, after] != new_id) & (pointer + 1 < J), pointer + 1, -1)


def resume_match_limit(copied_run: torch.Tensor, ngram: int) -> torch.Tensor:
    """How many of the last tokens the match features may read (copy_resume_cut): the confirmed copied
    run, at least 1, where the pointer is active (copied_run >= 0); all ngram elsewhere."""
    return torch.where(copied_run >= 0, copied_run.clamp(min=1, max=ngram), ngram)


def soft_capped(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """cap * tanh(scores / cap): ~scores near 0, never beyond +-cap; cap <= 0 leaves scores as they are."""
    return cap * torch.tanh(scores / cap) if cap > 0 else scores


def shifted(ids: torch.Tensor, n: int, fill: int) -> torch.Tensor:
    """ids [B, T] -> out[:, t] = ids[:, t - n] (fill where t < n)."""
    if n == 0:
        return ids
    return torch.cat([ids.new_full((ids.shape[0], min(n, ids.shape[1])), fill), ids[:, :-n]], dim=1)[:, : ids.shape[1]]


class CopyHead(nn.Module):
    def __init__(self, d_model: int, copy_dim: int, ngram: int, softcap: float = 0.0, suffix_match: bool = False,
                 edit_markers: tuple[int, int, list[int]] | None = None, align: bool = False, resume: bool = False,
                 resume_cut: bool = False, resume_next: bool = False, lookup: bool = False,
                 lookup_feed: bool = False):
        """edit_markers: (id of `old`, id of `new`, ids that end a call), read by the aligned-position
        (align) and the copy-pointer (resume) features, by the pointer's cut of the match (resume_cut;
        module doc) and by the lookup output (lookup; policy/copy_lookup.py), whose target token the
        heads also read with lookup_feed (copy_lookup.fed_hidden)."""
        super().__init__()
        if (align or resume or lookup) and edit_markers is None:
            raise ValueError("the align, resume and lookup features need edit_markers")
        if resume_cut and not resume:
            raise ValueError("resume_cut reads the copy pointer: it needs resume")
        self.resume_cut = resume_cut
        if resume_next and not resume:
            raise ValueError("resume_next reads the copy pointer: it needs resume")
        self.resume_next = resume_next
        if resume_next:
            self.next_weight = nn.Parameter(torch.tensor(0.0))
        self.edit_markers = edit_markers
        self.align, self.resume = align, resume
        if align:
            self.align_weight = nn.Parameter(torch.tensor(3.0))
        if resume:
            self.resume_weight = nn.Parameter(torch.tensor(3.0))
        self.softcap = softcap
        self.suffix_match = suffix_match
        self.query = nn.Linear(d_model, copy_dim)
        self.key = nn.Linear(d_model, copy_dim)
        self.gate = nn.Linear(d_model, 1)
        self.ngram = ngram
        # a prior towards copying a continuation: Adam moves a scalar ~lr per step, too slowly from 0
        self.match_weight = nn.Parameter(torch.full((ngram,), 3.0))
        self.lookup = lookup
        if lookup:  # no random draw: every other parameter starts as it does without the lookup
            self.lookup_gate = nn.Parameter(torch.zeros(d_model))  # the gate reads h_t; at first only the kind
            self.kind_bias = nn.Parameter(initial_kind_bias(ngram))
        if lookup_feed and not lookup:
            raise ValueError("lookup_feed reads the lookup output's target: it needs lookup")
        self.lookup_feed = lookup_feed
        if lookup_feed:  # zeros: the heads start as without it, and no random draw moves another parameter's init
            self.feed = nn.Parameter(torch.zeros(d_model, d_model))

    @property
    def reads_pointer(self) -> bool:
        """Whether the copy pointer's state is needed (the resume feature or the lookup output)."""
        return self.resume or self.lookup

    def _lookup_target(self, runs: torch.Tensor, visible: torch.Tensor, pointer: torch.Tensor,
                       exhausted: torch.Tensor, ids: torch.Tensor):
        """(target, kind, lookup_ids), each [...] (the queries' shape): the lookup's context position
        (-1 = none), its kind and the id it writes (any valid id where there is none). ids [B, J] the context."""
        target, kind = lookup_target(runs, visible, pointer, exhausted)  # [B, Q] or [B]
        rows = torch.arange(ids.shape[0]).view(-1, *([1] * (target.dim() - 1))).expand_as(target)
        return target, kind, ids[rows, target.clamp(min=0)]

    def _fed(self, hidden: torch.Tensor, embed: Callable[[torch.Tensor], torch.Tensor] | None,
             target: torch.Tensor | None, lookup_ids: torch.Tensor | None) -> torch.Tensor:
        """What the word head and the gates read [..., C]: h_t, or with lookup_feed h_t plus the target token's
        projected embedding (copy_lookup.fed_hidden). The copy attention's query and keys always read h_t
        (a cached step keys its fed tokens before their targets are known)."""
        if not self.lookup_feed:
            return hidden
        if embed is None:
            raise ValueError("lookup_feed reads the target's embedding: pass embed (TinyAgent._embed)")
        return fed_hidden(hidden, self.feed, embed(lookup_ids), target >= 0)

    def _lookup_logit(self, heads_input: torch.Tensor, target: torch.Tensor, kind: torch.Tensor) -> torch.Tensor:
        """The lookup term's gate logit [...] (-inf where it has no target); heads_input [..., C] is _fed's."""
        return torch.where(target >= 0, heads_input @ self.lookup_gate + self.kind_bias[kind], float("-inf"))

    def mixture_full(self, hidden: torch.Tensor, vocab_head: Callable[[torch.Tensor], torch.Tensor],
                     ids: torch.Tensor, embed: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """Full causal pass: hidden [B, T, C], ids [B, T] -> log P [B, T, V]. vocab_head: hidden [..., C] ->
        the word logits [..., V]; embed: ids -> their input embeddings [..., C] (read with lookup_feed).

        The heads run in one fixed order (word head, copy query and keys, lookup gate, copy gate): backward
        sums the gradients of the ops that read hidden in reverse order, and with lookup_feed off the
        shipped bases' bytes depend on that order."""
        B, T = ids.shape
        query_ids = torch.stack([shifted(ids, n - 1, -2) for n in range(1, self.ngram + 1)], -1)  # [B, T, N]
        candidate_prev = torch.stack([shifted(ids, n, -1) for n in range(1, self.ngram + 1)], -1)  # [B, T, N]
        pointer, copied_run, *exhausted = (edit_resume_pointer(ids, *self.edit_markers, with_exhausted=self.lookup)
                                           if self.reads_pointer else (None, None))  # [B, T] each
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        target = kind = lookup_ids = None
        if self.lookup:  # from ids alone
            target, kind, lookup_ids = self._lookup_target(suffix_runs(query_ids, candidate_prev), causal, pointer,
                                                           exhausted[0], ids)  # [B, T] each
        fed = self._fed(hidden, embed, target, lookup_ids)
        vocab_logits = vocab_head(fed)  # [B, T, V]
        scores = self.query(hidden) @ self.key(hidden).transpose(1, 2) / math.sqrt(self.query.out_features)
        scores = soft_capped(scores, self.softcap)  # [B, T, T]
        limit = resume_match_limit(copied_run, self.ngram) if self.resume_cut else None  # [B, T]
        scores = scores + match_scores(query_ids, candidate_prev, self.match_weight, self.suffix_match,
                                       limit)  # [B, T, T]
        if self.align:
            aligned = edit_alignment(ids, *self.edit_markers)  # [B, T]
            scores = scores + self.align_weight * (torch.arange(T)[None, None, :] == aligned[:, :, None])
        if self.resume:
            scores = scores + self.resume_weight * (torch.arange(T)[None, None, :] == pointer[:, :, None])
        if self.resume_next:
            after = resume_next_target(ids, pointer, copied_run, torch.arange(T).expand(B, T), self.edit_markers[1])
            scores = scores + self.next_weight * (torch.arange(T)[None, None, :] == after[:, :, None])
        attention = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        if self.lookup:
            lookup_logit = self._lookup_logit(fed, target, kind)
            return lookup_mixture_log_probs(vocab_logits, self.gate(fed).squeeze(-1), attention,
                                            ids[:, None, :].expand(B, T, T), lookup_logit, lookup_ids)
        return mixture_log_probs(vocab_logits, self.gate(fed).squeeze(-1), attention, ids[:, None, :].expand(B, T, T))

    def mixture_step(self, hidden: torch.Tensor, vocab_head: Callable[[torch.Tensor], torch.Tensor], cache,
                     embed: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """One prediction per row from the cache: hidden [B, C] at each row's last token (vocab_head and
        embed as in mixture_full); cache.ids / cache.copy_keys already hold that token. Returns log P [B, V].
        It runs without gradients (TinyAgent.forward_step), so the heads' order is free here."""
        lengths = cache.lengths  # [B], the last token sits at lengths - 1
        used = int(lengths.max().clamp(min=1))
        ids = cache.ids[:, :used]  # [B, J]
        scores = (cache.copy_keys[:, :used] @ self.query(hidden)[:, :, None]).squeeze(-1)
        scores = soft_capped(scores / math.sqrt(self.query.out_features), self.softcap)  # [B, J]
        rows = torch.arange(ids.shape[0])
        query_ids = torch.stack([torch.where(lengths - n >= 0, cache.ids[rows, (lengths - n).clamp(min=0)], -2)
                                 for n in range(1, self.ngram + 1)], -1)  # [B, N]
        candidate_prev = torch.stack([shifted(ids, n, -1) for n in range(1, self.ngram + 1)], -1)  # [B, J, N]
        # the scan state the cache advanced over every fed token (TinyAgent.forward_step), as in mixture_full
        pointer, copied_run = ((cache.resume.current(), cache.resume.current_run()) if self.reads_pointer
                               else (None, None))
        limit = resume_match_limit(copied_run, self.ngram)[:, None] if self.resume_cut else None  # [B, 1]
        scores = scores + match_scores(query_ids[:, None, :], candidate_prev, self.match_weight,
                                       self.suffix_match, limit).squeeze(1)
        if self.align:  # the full pass's feature at each row's last position
            aligned = edit_alignment(ids, *self.edit_markers)[rows, lengths.clamp(min=1) - 1]  # [B]
            scores = scores + self.align_weight * (torch.arange(used)[None, :] == aligned[:, None])
        if self.resume:
            scores = scores + self.resume_weight * (torch.arange(used)[None, :] == pointer[:, None])
        if self.resume_next:
            after = resume_next_target(ids, pointer, copied_run, lengths.clamp(min=1) - 1, self.edit_markers[1])  # [B]
            scores = scores + self.next_weight * (torch.arange(used)[None, :] == after[:, None])
        visible = torch.arange(used)[None, :] < lengths.clamp(min=1)[:, None]
        attention = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        if self.lookup:
            runs = suffix_runs(query_ids[:, None, :], candidate_prev).squeeze(1)  # [B, J]
            target, kind, lookup_ids = self._lookup_target(runs, visible, pointer, cache.resume.exhausted(),
                                                           ids.clamp(min=0))  # [B] each
            fed = self._fed(hidden, embed, target, lookup_ids)
            return lookup_mixture_log_probs(vocab_head(fed), self.gate(fed).squeeze(-1), attention, ids.clamp(min=0),
                                            self._lookup_logit(fed, target, kind), lookup_ids)
        return mixture_log_probs(vocab_head(hidden), self.gate(hidden).squeeze(-1), attention, ids.clamp(min=0))
