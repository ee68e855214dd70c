"""The copy head's lookup output (`copy_lookup`): a third term of the pointer-generator mixture that
writes one context token, chosen by exact rules rather than by learned attention.

At the position that predicts token t+1, with final hidden state h_t:

    P(w) = g_v * softmax(logits)[w]  +  g_c * sum_j a_j [ids_j = w]  +  g_l * [w = ids_target(t)]
    (g_v, g_c, g_l) = softmax(gate(h_t), 0, lookup_gate . h_t + kind_bias[kind(t)])    (g_l = 0: no target)

The first two terms are copy_head.py's mixture (there g_v = sigmoid(gate), g_c = 1 - g_v). The target:

- inside an Edit's new_string, while the copy pointer (copy_head.ResumeState) is inside old_string,
  the pointed token (kind 0): new_string is old_string with a few tokens changed. Right after a change
  the pointer still sits on the changed token (`min` after `max` was written for it), and the lookup
  offers it again; a version that offered nothing there until the pointer confirmed a copy (in the
  oracle's Edits the token after a change is the pointed one 111 times, the one after it 131 times and
  neither 489 times) did worse after RL on new shapes (docs/TOOLS.md), so this one stays;
- inside new_string once the pointer has passed old_string's end, none: new_string should end;
- elsewhere, the token after the latest of the longest runs of context tokens equal to the last ones
  (prompt lookup decoding's rule), runs of MIN_RUN to copy_ngram tokens (kind n - MIN_RUN + 1 for a run
  of n), none where there is no such run: copying the rest of a listed line into old_string. A lone
  matching token says little: after `<nl> <indent>` in old_string (the listing has line numbers there)
  the latest `<indent>` is old_string's own first one, and the base that trusted such runs wrote the
  first line's name again where the second line began.

Why a term of its own: in the copy attention the match and pointer features are added to a learned score,
and on function shapes no training task had, the learned score outvotes them (the tools RL base gave the
first token of new_string, a copy of old_string's first, 0.001 against `return` at 0.99, the training
templates' habit). Here the learned parts decide only how much to trust the rule's token (one gate per
position, with a bias per kind), not which token it is.

With `copy_lookup_feed` the word head and the two gates read h_t + e(ids_target(t)) @ F instead of h_t
where the lookup has a target (fed_hidden; F [C, C] learned, zero at first; e the input embedding), so the
word head can learn which token to write in place of the one the lookup points at, whatever the line.

Every number comes from token ids and the same gate arithmetic in the full pass and the cached step, so
token-in/token-out stays exact (tests/test_copy_lookup.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

MIN_RUN = 2  # the shortest run of matching tokens the lookup follows outside new_string


def suffix_runs(query_ids: torch.Tensor, candidate_prev_ids: torch.Tensor) -> torch.Tensor:
    """How many of the last query tokens, back from the last, equal the candidate's predecessors in order.

    query_ids [..., Q, N] (the last N tokens before the prediction, most recent first; -2 = none);
    candidate_prev_ids [..., J, N] (the N tokens before each candidate, nearest first; -1 = none).
    Returns [..., Q, J] long in 0..N."""
    runs = torch.zeros(query_ids.shape[:-1] + candidate_prev_ids.shape[-2:-1], dtype=torch.long)
    unbroken = torch.ones_like(runs, dtype=torch.bool)
    for n in range(query_ids.shape[-1]):
        unbroken = unbroken & (query_ids[..., :, None, n] == candidate_prev_ids[..., None, :, n])
        runs += unbroken
    return runs


def lookup_target(runs: torch.Tensor, visible: torch.Tensor, pointer: torch.Tensor,
                  exhausted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(target, kind), each [..., Q] long: the position whose token the lookup writes (-1 = none) and its
    kind (0 = the copy pointer, n - MIN_RUN + 1 = a run of n tokens; 0 where there is no target).

    runs [..., Q, J] (suffix_runs); visible [..., Q, J] bool (the candidates each query may read);
    pointer [..., Q] the copy pointer's old_string position (-1 = not inside old_string); exhausted
    [..., Q] bool (inside new_string, the pointer past old_string's end)."""
    J = runs.shape[-1]
    order = torch.arange(J)
    # the longest run first, the latest position among equals: run * (J + 1) + position
    score = torch.where(visible & (runs >= MIN_RUN), runs * (J + 1) + order, -1).amax(-1)  # [..., Q]
    matched = score >= 0
    target = torch.where(matched, score % (J + 1), -1)
    kind = torch.where(matched, score // (J + 1) - MIN_RUN + 1, 0)
    inside = pointer >= 0
    target = torch.where(inside, pointer, torch.where(exhausted, -1, target))
    kind = torch.where(inside | exhausted, 0, kind)
    return target, kind


def lookup_mixture_log_probs(vocab_logits: torch.Tensor, gate_logit: torch.Tensor, attention: torch.Tensor,
                             context_ids: torch.Tensor, lookup_logit: torch.Tensor,
                             lookup_ids: torch.Tensor) -> torch.Tensor:
    """log P of the three-term mixture (module doc).

    vocab_logits [..., V]; gate_logit [...]; attention [..., J] (sums to 1); context_ids [..., J];
    lookup_logit [...] (-inf where there is no target); lookup_ids [...] the target's token id (any valid
    id where there is none). Returns [..., V]; finite everywhere (the vocabulary term always is)."""
    copy_p = torch.zeros_like(vocab_logits).scatter_add_(-1, context_ids, attention)  # [..., V]
    weights = torch.stack([gate_logit, torch.zeros_like(gate_logit), lookup_logit], -1).log_softmax(-1)  # [..., 3]
    log_vocab = F.log_softmax(vocab_logits, dim=-1) + weights[..., 0, None]
    log_copy = torch.where(copy_p > 0, copy_p.clamp_min(1e-38).log(), float("-inf")) + weights[..., 1, None]
    log_lookup = torch.full_like(vocab_logits, float("-inf")).scatter(-1, lookup_ids[..., None], weights[..., 2, None])
    return torch.logaddexp(torch.logaddexp(log_vocab, log_copy), log_lookup)


def fed_hidden(hidden: torch.Tensor, feed: torch.Tensor, target_embedding: torch.Tensor,
               has_target: torch.Tensor) -> torch.Tensor:
    """h_t + e(target) @ feed where the lookup has a target, else h_t (`copy_lookup_feed`): the word head
    and the gates read which token the lookup would write (a selective read, as CopyNet feeds the copied
    word back), so a learned change of that token (`min` read, `max` written) need not be found again
    by attention at each new position and shape.

    hidden [..., C]; feed [C, C]; target_embedding [..., C] (the target's input embedding); has_target
    [...] bool. Returns [..., C]."""
    return hidden + torch.where(has_target[..., None], target_embedding @ feed, 0.0)


def initial_kind_bias(ngram: int) -> torch.Tensor:
    """kind_bias at initialisation [ngram - MIN_RUN + 2]: the pointer 2, a run of n tokens n - 1 (the
    longer the run, the surer the line)."""
    return torch.tensor([2.0] + [float(n - 1) for n in range(MIN_RUN, ngram + 1)])
