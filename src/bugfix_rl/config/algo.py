"""The RL objective's config group (`algo=grpo` | `dapo` | ..., conf/algo/): its sampling, advantages,
loss and optimiser."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class TurnCreditConfig:
    """Per-turn credit (algo/turn_credit.py, docs/ALGORITHMS.md "Per-turn credit"): each policy token's
    advantage gains coef * (its turn's discounted return of turn rewards - the same turn's mean over the
    group's other episodes). coef 0, the default, leaves every advantage as the outcome estimator gives it."""

    coef: float = 0.0  # weight of the turn-level advantage; 0 = off (outcome-only)
    malformed_cost: float = 0.5  # turn reward: minus this per malformed call in the turn
    unanswered_cost: float = 1.0  # turn reward: minus this on the last turn of an episode that ended without an answer
    gamma: float = 0.5  # discount of later turns' rewards in a turn's return (1: all count, 0: the turn's own only)


@dataclass
class AlgoConfig:
    """The RL objective and its sampling (book defaults; verl/TRL names in docs/ALGORITHMS.md)."""

    name: str = "grpo"  # the algorithm's label (conf/algo/<name>.yaml sets it with its knobs)
    group_size: int = 8  # episodes per task per step
    prompts_per_step: int = 8  # tasks per step
    temperature: float = 1.0  # sampler and trainer share it
    adv_mode: str = "grpo"  # grpo | dr_grpo | rloo | reinforce_pp
    adv_eps: float = 1e-6  # added to the group's reward std before dividing (grpo)
    overlong_buffer: int = 0  # DAPO soft overlong penalty over the last N tokens of the context; 0 = off
    dynamic_sampling: bool = False  # resample degenerate (all-equal reward) groups
    max_sample_rounds: int = 4  # dynamic sampling: rounds of resampling at most
    ratio_level: str = "token"  # token | sequence (GSPO)
    clip_low: float = 0.2  # ratio clipped below at 1 - clip_low (PPO's epsilon), in [0, 1)
    clip_high: float = 0.2  # > clip_low: DAPO clip-higher
    dual_clip: Optional[float] = None  # c > 1 caps the loss for A < 0 at -c*A
    loss_mode: str = "token_mean"  # token_mean | seq_mean_token_mean | seq_mean_token_sum | norm_const
    norm_const: Optional[float] = None  # loss_mode=norm_const: the constant normaliser
    kl_coef: float = 0.0  # KL to a frozen reference (the starting policy)
    kl_kind: str = "k3"  # k1 | k2 | k3
    kl_in_reward: bool = False  # subtract kl_coef * KL from the reward instead of adding it to the loss
    entropy_coef: float = 0.0  # entropy bonus
    tis_cap: Optional[float] = None  # truncated importance weights min(pi/mu, C); None = off
    tis_level: str = "token"  # token | sequence
    max_traj_gap: Optional[float] = None  # per-trajectory gap filter: an episode whose largest |log pi_prox - log mu| at a policy token exceeds this leaves the loss (gap_filtered counts them); None = off
    lr: float = 1e-3  # the policy's learning rate (Adam)
    lr_schedule: str = "constant"  # constant | linear | cosine: each step's lr is lr x its factor (algo/lr_schedule.py)
    lr_warmup_steps: int = 0  # the factor rises linearly from 0 over these first steps, then follows lr_schedule
    lr_decay_steps: int = 0  # 0: decay over every step after the warm-up; N: hold lr until the last N steps, decay over those
    epochs: int = 1  # passes over each step's batch
    minibatches: int = 2  # optimizer steps per epoch: the batch split into this many minibatches
    micro_batch_size: int = 0  # rows per gradient-accumulation micro-batch; 0 = whole minibatch
    # the trainer's forward on the episodes packed end to end, each row as wide as the longest episode,
    # where the policy takes packed rows (TinyAgent without a copy head; the copy head and chat models
    # read whole sequences, so they run on padded rows): the same values up to float summation order,
    # about 15% less update time (docs/PERFORMANCE.md)
    pack_rows: bool = True  # pack episodes into rows for the trainer's forward (see the comment above)
    max_grad_norm: float = 1.0  # gradient norm clipped to this before each optimizer step
    max_nonfinite_skips: int = 3  # optimizer steps in a row skipped for a NaN/inf loss or gradient norm before the run stops
    task_filter: bool = False  # drop tasks whose recent pass rate is 0 or 1 from the step's draw
    curriculum: bool = False  # draw tasks with weight growing as their recent pass rate falls
    turn_credit: TurnCreditConfig = field(default_factory=TurnCreditConfig)  # per-turn credit; off by default
    mask_infra: bool = True  # episodes whose reward the infrastructure decided (env_error, grading sandbox_error) leave advantages and pass rates (algo/infra_mask.py)
    canary_rate: float = 0.0625  # canary groups per training group: ceil(rate x prompts_per_step), at least 1, unsolvable tasks sampled each step for canary_reward, never trained on (gym/canaries.py, evaluate/canary_reward.py); 0 = none
