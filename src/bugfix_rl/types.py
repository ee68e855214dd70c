"""The typed containers that flow between the stages (bottom floor: torch only, so every floor may
import them): a sampled episode (`Trajectory`), episodes collated for the loss (`Batch`, `collate`), and
the per-position outputs of a trainer forward (`LogProbs`). Shapes are in each docstring: B episodes,
T tokens of the longest one."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Trajectory:
    """One episode, token-in/token-out.

    ids: every token of the episode as the model saw it (prompt, sampled actions, observations), [T];
    policy_mask: True where the token was sampled by the policy, [T];
    sampler_logp: log-prob the sampler gave each sampled token (0 elsewhere), [T];
    reward: scalar outcome; group: index of its group (same task, same step); info: what happened
    (an env-specific record such as EpisodeInfo); policy_version: the learner step whose weights
    sampled it (its staleness when trained at step s is s - policy_version); oov_words: the words of
    the episode's out-of-vocabulary slots, in slot order (`Tokenizer.decode(ids, oov_words)`); guided:
    (position in ids, allowed ids) of each token sampled under guided decoding (policy/guided_edits.py),
    which the trainer's log-probs renormalise over as the sampler did.
    """

    ids: list[int]
    policy_mask: list[bool]
    sampler_logp: list[float]
    reward: float
    group: int
    info: object
    policy_version: int = 0
    oov_words: tuple[str, ...] = ()
    guided: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @property
    def policy_tokens(self) -> int:
        return sum(self.policy_mask)


@dataclass
class Batch:
    """Collated trajectories, aligned for next-token prediction.

    ids: [B, T] right-padded token ids; mask: [B, T-1] float, 1 where ids[:, 1:] was sampled by the
    policy (the positions whose log-prob the loss uses); old_logp: [B, T-1] sampler log-probs at the
    same positions (0 elsewhere); rewards: [B]; groups: [B] long group index; advantages: [B] (filled
    by the advantage stage; zeros until then); pad_id: the id right padding uses (a chat model's pad
    token may also occur inside an episode, so trimming never cuts a policy token); turn_advantages:
    [B, T-1] per-token term added to `advantages` (algo.turn_credit; 0 off the mask), None when off;
    allowed: [B, T-1, K] the ids guided decoding allowed at each position, right-padded with -1 (all -1
    where it did not guide; policy/guided_edits.hold_to_allowed), None when no episode was guided.
    """

    ids: torch.Tensor
    mask: torch.Tensor
    old_logp: torch.Tensor
    rewards: torch.Tensor
    groups: torch.Tensor
    advantages: torch.Tensor
    pad_id: int = 0
    turn_advantages: torch.Tensor | None = None
    allowed: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.ids.shape[0]

    def rows(self, index: torch.Tensor | slice) -> "Batch":
        """A sub-batch of rows, trimmed to its own longest sequence."""
        sub = Batch(*(t[index] for t in (self.ids, self.mask, self.old_logp, self.rewards, self.groups,
                                          self.advantages)), pad_id=self.pad_id,
                    turn_advantages=None if self.turn_advantages is None else self.turn_advantages[index],
                    allowed=None if self.allowed is None else self.allowed[index])
        return sub.trimmed()

    def token_advantages(self) -> torch.Tensor:
        """What the loss weighs the policy tokens by: advantages [B] (one per sequence), or with turn
        credit advantages[:, None] + turn_advantages [B, T-1]."""
        if self.turn_advantages is None:
            return self.advantages
        return self.advantages[:, None] + self.turn_advantages

    def lengths(self) -> torch.Tensor:
        """[B] each row's length: through its last non-pad token or its last policy token, at least 1."""
        T = self.ids.shape[1]
        last_real = ((self.ids != self.pad_id) * torch.arange(1, T + 1)).amax(1)  # 1 + last non-pad index
        last_policy = ((self.mask > 0) * torch.arange(2, T + 1)).amax(1)  # 1 + index in ids of the last policy token
        return torch.maximum(last_real, last_policy).clamp_min(1)

    def trimmed(self) -> "Batch":
        if not len(self):
            return self
        length = int(self.lengths().max())
        turn = None if self.turn_advantages is None else self.turn_advantages[:, : length - 1]
        allowed = None if self.allowed is None else self.allowed[:, : length - 1]
        return Batch(self.ids[:, :length], self.mask[:, : length - 1], self.old_logp[:, : length - 1],
                     self.rewards, self.groups, self.advantages, self.pad_id, turn, allowed)


@dataclass
class LogProbs:
    """Per-position outputs of one trainer forward, aligned with ids[:, 1:].

    logp: [B, T-1] log-prob of the next token (differentiable); entropy: [B, T-1] (detached unless
    asked for gradients).
    """

    logp: torch.Tensor
    entropy: torch.Tensor


def collate(trajectories: list[Trajectory], pad_id: int = 0) -> Batch:
    """Pad to the longest episode and align masks/log-probs with ids[:, 1:]."""
    B = len(trajectories)
    lengths = [len(t.ids) for t in trajectories]
    T = max(lengths)
    for t, n in zip(trajectories, lengths):
        if len(t.policy_mask) != n or len(t.sampler_logp) != n:
            raise ValueError(f"a trajectory of {n} ids has {len(t.policy_mask)} mask entries and "
                             f"{len(t.sampler_logp)} log-probs")
    real = torch.arange(T) < torch.tensor(lengths)[:, None]  # [B, T]; filled row by row, like the lists below
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    mask = torch.zeros(B, T)
    logp = torch.zeros(B, T)
    ids[real] = torch.tensor([i for t in trajectories for i in t.ids], dtype=torch.long)
    mask[real] = torch.tensor([m for t in trajectories for m in t.policy_mask], dtype=torch.float)
    logp[real] = torch.tensor([x for t in trajectories for x in t.sampler_logp], dtype=torch.float)
    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float)
    groups = torch.tensor([t.group for t in trajectories], dtype=torch.long)
    return Batch(ids, mask[:, 1:], logp[:, 1:], rewards, groups, torch.zeros(B), pad_id,
                 allowed=_allowed_ids(trajectories, T))


def _allowed_ids(trajectories: list[Trajectory], T: int) -> torch.Tensor | None:
    """Batch.allowed from the episodes' guided positions: [B, T-1, K], -1 padded; None when none was guided."""
    K = max((len(ids) for t in trajectories for _, ids in t.guided), default=0)
    if not K:
        return None
    allowed = torch.full((len(trajectories), T, K), -1, dtype=torch.long)
    rows, positions, columns, values = [], [], [], []
    for b, t in enumerate(trajectories):
        for position, ids in t.guided:
            rows += [b] * len(ids)
            positions += [position] * len(ids)
            columns += range(len(ids))
            values += ids
    allowed[rows, positions, columns] = torch.tensor(values, dtype=torch.long)
    return allowed[:, 1:]  # aligned with ids[:, 1:], as the mask
