"""The training dashboard: one row of metrics per step, to the console, metrics.jsonl and wandb
(wandb_run.py).

Row keys are namespaced by what they measure: outcome (reward, pass_rate), behaviour (reads, tests,
edits, ...), optimizer (entropy, approx_kl, clip_frac, grad_norm, zero_adv_frac) and consistency
(logp_gap between sampler and trainer) and staleness (learner step minus the sampling weights' step,
per trained token, and the truncated fraction of the importance weights). The PNG panel figure is
drawn from the same rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bugfix_rl.evaluate.evaluate import behaviour_stats

PANELS = {  # panel -> keys; quantities of different size never share an axis
    "outcome": ("reward", "pass_rate", "exploit", "public_hidden_gap", "canary_reward"),  # canary: with its 95% band
    "behaviour": ("reads", "tests", "edits", "turns", "malformed", "failed", "malformed_alarm"),  # run/alarms.py
    "policy": ("entropy", "zero_adv_frac", "collapse_alarm", "obs_entropy", "mask_share"),  # collapse_alarm: 1 at steps stopping.collapse_alarm fired; q28's two
    "update size": ("approx_kl", "clip_frac"),  # log scale: both live near 1e-4..1e-1
    "gradient": ("grad_norm", "nonfinite_skips"),
    "consistency": ("logp_gap", "logp_gap_mean", "logp_gap_p99", "kl_mu_prox", "kl_mu_prox_alarm", "gap_filtered"),
    "staleness": ("staleness_mean", "staleness_max", "tis_truncated_frac"),  # drawn when a run has either
    "infrastructure": ("infra_masked", "infra_groups_dropped"),  # drawn when a run masked any episode
}
LOG_PANELS = {"update size": "log", "consistency": "symlog"}
ALARMS = ("collapse_alarm", "malformed_alarm", "kl_mu_prox_alarm")  # 0/1 series, drawn only in a run where they fired
CONSOLE_KEYS = ("reward", "reads", "tests", "entropy", "zero_adv_frac", "approx_kl", "clip_frac", "grad_norm",
                "logp_gap")
ASYNC_KEYS = ("staleness_mean", "tis_truncated_frac")  # added to the console row when max_staleness > 0


def episode_diagnostics(trajectories) -> dict:
    """The design review's per-step episode diagnostics (docs/MEASUREMENT.md).

    public_hidden_gap (q7): among graded episodes (submitted, or graded at the turn limit), the share
    passing every public test minus the share passing every hidden test; a widening gap is the first
    sign of a reward that pays for fitting the visible tests. length_{pass,fail}_p{50,90} (q1, q27):
    turns of successful and of failed episodes. None where there is nothing to measure.
    """
    graded = [t.info for t in trajectories if (t.info.submitted or getattr(t.info, "graded", False))
              and not getattr(t.info, "env_error", "")]
    row: dict = {"public_hidden_gap": (sum(i.public_pass == 1.0 for i in graded) - sum(i.hidden_pass for i in graded))
                 / len(graded) if graded else None}
    for outcome, wanted in (("pass", True), ("fail", False)):
        turns = torch.tensor([float(t.info.turns) for t in trajectories if bool(t.info.success) == wanted],
                             dtype=torch.float64)
        p50, p90 = torch.quantile(turns, torch.tensor([0.5, 0.9], dtype=torch.float64)).tolist() if len(turns) \
            else (None, None)
        row[f"length_{outcome}_p50"], row[f"length_{outcome}_p90"] = p50, p90
    return row


def dashboard_row(step: int, rollouts, update_metrics: dict, extra: dict) -> dict:
    """Everything SPEC §4 asks for at one step. When the advantage stage masked episodes whose reward
    the infrastructure decided (extra's infra_masked), the outcome and behaviour means leave them out."""
    from bugfix_rl.rollout.env_errors import infrastructure_failure

    counted = rollouts.kept
    if extra.get("infra_masked"):
        counted = [t for t in rollouts.kept if not infrastructure_failure(t.info)]
    row = {"step": step}
    row.update(behaviour_stats(counted))
    row.update(episode_diagnostics(counted))
    row["sampled_episodes"] = len(rollouts.sampled)
    row["sample_rounds"] = rollouts.rounds
    row.update(update_metrics)
    row.update(extra)
    return row


class JsonlLogger:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a")

    def log(self, row: dict) -> None:
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()

    def final(self, result: dict, episodes: dict, tokenizer) -> None:
        """Nothing: the rows are this file's record; eval.json holds the final evaluation."""

    def close(self) -> None:
        self.file.close()


def read_metrics(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _has_staleness(rows: list[dict]) -> bool:
    return any(r.get("staleness_max", 0) > 0 or r.get("tis_truncated_frac") is not None for r in rows)


def plot_dashboard(rows: list[dict], path: Path, title: str = "", validation: dict | None = None) -> Path:
    """Write `dashboard_figure` as a PNG."""
    import matplotlib.pyplot as plt

    fig = dashboard_figure(rows, title, validation)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _color_of(ax, label: str):
    """The color of the line drawn for `label` on `ax` (its label may carry a suffix), else None."""
    return next((line.get_color() for line in ax.get_lines() if line.get_label().startswith(label)), None)


def dashboard_figure(rows: list[dict], title: str = "", validation: dict | None = None):
    """The panel figure (2 rows of 4 at most): outcome, with validation pass@1 and its 95% interval at each
    checkpoint (`validation`: step -> evaluate_split result); behaviour; policy entropy and degenerate
    groups; update size (approx_kl, clip_frac, log scale); gradient norm (and skipped steps); sampler-
    trainer consistency (symlog); staleness when the run has any (`_has_staleness`); canary_reward (the
    reward paid on unsolvable canary tasks, evaluate/canary_reward.py) in the outcome panel with its 95% band; episodes masked for
    infrastructure failures and the groups that dropped out, when any were. A series that
    lies on top of another (reward and pass_rate with hidden-test rewards) is drawn dashed with markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    optional = {"staleness": _has_staleness(rows), "infrastructure": any(r.get("infra_masked") for r in rows)}
    panels = {name: keys for name, keys in PANELS.items() if optional.get(name, True)}
    columns = 4
    fig, axes = plt.subplots(2, columns, figsize=(4.2 * columns, 7.0))
    axes = list(axes.flat)
    steps = [r["step"] for r in rows]
    for ax, (panel, keys) in zip(axes, panels.items()):
        drawn = []
        for key in keys:
            values = [float("nan") if r.get(key) is None else r[key] for r in rows]
            if all(v != v for v in values) or (key in ALARMS and not any(v == 1.0 for v in values)):
                continue
            zeros = LOG_PANELS.get(panel) == "log" and any(v <= 0 for v in values)
            if zeros:  # a log axis would draw a step's 0 as a line down to its floor
                values = [v if v > 0 else float("nan") for v in values]
            hidden = any(values == other for other in drawn)  # exactly under a series already drawn
            ax.plot(steps, values, label=key + (" (= above)" if hidden else "") + (" (0 not drawn)" if zeros else ""),
                    linestyle="--" if hidden else "-", marker="." if hidden else None)
            drawn.append(values)
        if panel == "outcome" and any(r.get("canary_reward_lo") is not None for r in rows):
            band = [(s, r["canary_reward_lo"], r["canary_reward_hi"]) for s, r in zip(steps, rows)
                    if r.get("canary_reward_lo") is not None]
            ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band], alpha=0.15,
                            color=_color_of(ax, "canary_reward"), label="canary_reward 95% (Wilson)")
        if panel == "outcome" and validation:
            checkpoints = sorted(validation)
            mid = [validation[s]["pass_at_1"] for s in checkpoints]
            lo = [m - validation[s]["ci"][0] for s, m in zip(checkpoints, mid)]
            hi = [validation[s]["ci"][1] - m for s, m in zip(checkpoints, mid)]
            ax.errorbar(checkpoints, mid, yerr=[lo, hi], fmt="o", color="black", capsize=3, markersize=4,
                        label="validation pass@1 [95% CI]")
        scale = LOG_PANELS.get(panel)
        if scale == "log" and any(v > 0 for values in drawn for v in values if v == v):
            ax.set_yscale("log")
        elif scale == "symlog":
            ax.set_yscale("symlog", linthresh=1e-8)
        ax.set_title(panel)
        ax.set_xlabel("step")
        if ax.get_legend_handles_labels()[0]:  # a panel with nothing logged (no behaviour keys) has no legend
            ax.legend(fontsize=7, loc="upper left" if panel == "outcome" else "best")
        ax.grid(alpha=0.3)
    for ax in axes[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    # Fixed margins: tight_layout measured every tick label (about 0.3-0.6 s a figure) for the same result.
    fig.subplots_adjust(left=0.045, right=0.99, bottom=0.08, top=0.91 if title else 0.95, wspace=0.28, hspace=0.32)
    return fig
