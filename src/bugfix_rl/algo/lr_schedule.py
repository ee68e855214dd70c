"""The RL learning-rate schedule: each policy update's learning rate is algo.lr times a factor of its step.

The conventions are those of transformers' `get_*_schedule_with_warmup` (TRL's GRPOTrainer takes its
`lr_scheduler_type` from them; its default is "linear", verl's actor default is constant): over the first
`warmup` steps the factor rises linearly from 0 (step 0 is taken at lr 0), then it stays at 1 (constant),
falls linearly towards 0 at step `steps` (linear) or along a half cosine (cosine); with `decay` steps, it
stays at 1 until the run's last `decay` steps and falls over those. The default, constant
with no warmup, multiplies by exactly 1.0, so runs without a schedule keep their arithmetic bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

# name -> (fraction of the decay phase done, in [0, 1)) -> factor
DECAYS: dict[str, Callable[[float], float]] = {
    "constant": lambda done: 1.0,
    "linear": lambda done: 1.0 - done,
    "cosine": lambda done: 0.5 * (1.0 + math.cos(math.pi * done)),
}


def lr_factor(schedule: str, step: int, steps: int, warmup: int = 0, decay: int = 0) -> float:
    """The factor on the learning rate of RL step `step` (counted from 0) of a run of `steps` steps.

    decay: 0 decays over every step after the warm-up; N > 0 holds the factor at 1 until the last N steps
    and decays over those (warmup-stable-decay: the run's first steps are those of a constant run).
    """
    if schedule not in DECAYS:
        raise ValueError(f"lr_schedule={schedule!r}; valid: {', '.join(DECAYS)}")
    if step < warmup:
        return step / warmup
    start = steps - decay if decay else warmup  # where the decay begins
    if step < start:
        return 1.0
    # a step past the run's end (a bench that runs steps + 1) stays at the end's factor: never below 0
    return DECAYS[schedule](min(1.0, (step - start) / max(1, steps - start)))
