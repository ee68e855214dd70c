"""The entropy of a policy's next-token distribution from its logits, as a pure tensor function: the
trainer's pass (algo/update.token_logprobs) and a chat model's frugal pass (policy/qwen3.py) both take
it, so it sits on the policy floor. Tested against hand-computed values in tests/test_objective.py."""

from __future__ import annotations

import torch
from torch import Tensor


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of softmax(logits) over the last axis.   [..., V] -> [...]

    Via log_softmax, so large logits do not overflow; -inf logits (masked vocabulary) contribute 0
    with finite gradients. Computed in the input dtype: upcast bf16 logits first for exact values.
    """
    logp = torch.log_softmax(logits, dim=-1)
    finite_logp = logp.masked_fill(torch.isneginf(logp), 0.0)  # avoid 0 * -inf
    return -(logp.exp() * finite_logp).sum(dim=-1)
