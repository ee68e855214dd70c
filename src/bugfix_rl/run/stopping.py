"""Early stopping (`stop.*`): the two signals of the book's §19.9, as pure functions of the run so far.

(a) validation: the best checkpoint's pass@1 has not been beaten (by more than `min_delta`) for
    `patience` checkpoints in a row; with `gain=interval`, beaten means beyond the upper end of the
    best checkpoint's 95% interval (plus `min_delta`), the book's rule;
(b) the training signal is spent: `zero_adv_frac` (groups whose rewards are all equal, so they carry
    no gradient) has been above `zero_adv_threshold` at each of the last `zero_adv_window` steps.

(c) the infrastructure is failing: more than `max_infra_share` of a step's episodes had their reward
    decided by infrastructure (`infra_share`, algo/infra_mask.py; masked from training, but a run
    that loses that many is measuring its cluster, not its policy).

(d) the policy collapsed (`collapse_reason`): its entropy stayed below `collapse_entropy` while the
    reward did not rise, or its gradient was exactly 0 although some group carried an advantage, for
    `collapse_window` steps. `stop.collapse`: warn (the default: a line on stderr and `collapse_alarm`
    on the dashboard), stop (also ends the run, as the rules above do) or off.

(e) malformed tool calls rising (run/alarms.py; `malformed_stop`): a warning by default, a stop rule on request.

The trainer asks after every step (b)-(e) and after every checkpoint (a); the first rule that fires
ends the run at that step, which is then checkpointed, and eval.json records the rule and the step.
"""

from __future__ import annotations

GAINS = ("point", "interval")  # stop.gain: what counts as beating the best validation checkpoint


def validation_stalled(validation: dict[int, dict], patience: int, min_delta: float = 0.0,
                       gain: str = "point") -> bool:
    """True when the last `patience` checkpoints (in step order) all failed to beat the best pass@1
    before them: by more than min_delta (gain=point), or beyond the upper end of the best's 95% interval
    plus min_delta (gain=interval, the book's: a gain beyond the earlier checkpoint's noise; of equal
    scores the earliest is the best). patience 0: never."""
    if gain not in GAINS:
        raise ValueError(f"stop.gain={gain!r}; valid: {', '.join(GAINS)}")
    if patience <= 0 or len(validation) <= patience:
        return False
    steps = sorted(validation)
    scores = [validation[step]["pass_at_1"] for step in steps]
    bar = max(scores[:-patience])
    if gain == "interval":
        bar = validation[steps[scores.index(bar)]]["ci"][1]
    return all(score <= bar + min_delta for score in scores[-patience:])


def signal_spent(rows: list[dict], window: int, threshold: float) -> bool:
    """True when each of the last `window` steps had zero_adv_frac > threshold. window 0: never."""
    if window <= 0 or len(rows) < window:
        return False
    recent = [row.get("zero_adv_frac") for row in rows[-window:]]
    return all(value is not None and value > threshold for value in recent)


def collapse_reason(rows: list[dict], window: int, entropy_floor: float) -> str | None:
    """Why the policy looks collapsed over the last `window` steps, in words, or None. window 0: never.

    - deterministic and not improving: entropy (per policy token) below `entropy_floor` at every step
      while the reward did not rise (last <= first) and not every episode passed (a policy that
      solves everything may be sure of itself);
    - dead gradient: grad_norm exactly 0 at every step although some group had rewards that differed
      (zero_adv_frac < 1). With every group all-equal a zero gradient is expected; `signal_spent`
      is the rule for that."""
    if window <= 0 or len(rows) < window:
        return None
    recent = rows[-window:]
    entropies = [row.get("entropy") for row in recent]
    rewards = [row.get("reward") for row in recent]
    if (all(e is not None and e < entropy_floor for e in entropies) and None not in rewards
            and rewards[-1] <= rewards[0] and not all(row.get("pass_rate") == 1.0 for row in recent)):
        return (f"policy collapse: entropy below {entropy_floor:g} for {window} steps while the reward went"
                f" {rewards[0]:.3f} -> {rewards[-1]:.3f}")
    if all(row.get("grad_norm") == 0.0 and row.get("zero_adv_frac", 1.0) < 1.0 for row in recent):
        return f"policy collapse: gradient exactly 0 for {window} steps although groups had advantages"
    return None


def collapse_alarm(stop, rows: list[dict]) -> str | None:
    """collapse_reason under the run's stop.* settings (None with stop.collapse=off)."""
    if stop.collapse == "off":
        return None
    return collapse_reason(rows, stop.collapse_window, stop.collapse_entropy)


def stop_reason(stop, validation: dict[int, dict], rows: list[dict], at_checkpoint: bool) -> str | None:
    """The rule that ends the run now, in words, or None. `stop` is a config.StopConfig."""
    if at_checkpoint and validation_stalled(validation, stop.patience, stop.min_delta, stop.gain):
        before = sorted(validation)[:-stop.patience]  # the best the last `patience` checkpoints failed to beat
        best = max(before, key=lambda s: (validation[s]["pass_at_1"], -s))
        beyond = f" beyond its 95% interval (upper {validation[best]['ci'][1]:.3f})" if stop.gain == "interval" else ""
        return (f"validation: no gain over step {best}'s pass@1 {validation[best]['pass_at_1']:.3f}{beyond} for"
                f" {stop.patience} checkpoints")
    if stop.malformed_stop and rows and rows[-1].get("malformed_alarm"):
        return (f"malformed tool calls rising: {rows[-1]['malformed_trend']:+.3f} per episode per step over the"
                f" last {stop.malformed_window} steps (stop.malformed_stop=true)")
    if stop.kl_mu_prox_stop and rows and rows[-1].get("kl_mu_prox_alarm"):
        return (f"sampler-policy mismatch: KL(mu || pi_prox) {rows[-1]['kl_mu_prox']:.3g} per policy token above"
                f" stop.kl_mu_prox_max={stop.kl_mu_prox_max:g} (stop.kl_mu_prox_stop=true)")
    share = rows[-1].get("infra_share") if rows else None
    if share is not None and share > stop.max_infra_share:
        return (f"infrastructure: {rows[-1]['infra_masked']} episodes ({share:.0%}) of step {rows[-1]['step']} had"
                f" their reward decided by sandbox or env failures, above stop.max_infra_share={stop.max_infra_share:g}")
    if signal_spent(rows, stop.zero_adv_window, stop.zero_adv_threshold):
        return (f"training signal spent: zero_adv_frac above {stop.zero_adv_threshold:g} for"
                f" {stop.zero_adv_window} steps")
    if stop.collapse == "stop":
        collapsed = collapse_alarm(stop, rows)
        if collapsed:
            return collapsed + " (stop.collapse=stop)"
    return None
