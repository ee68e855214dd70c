"""The training dashboard: one row of metrics per step, to the console, metrics.jsonl and wandb.

Row keys are namespaced by what they measure: outcome (reward, pass_rate), behaviour (reads, tests,
edits, ...), optimizer (entropy, approx_kl, clip_frac, grad_norm, zero_adv_frac) and consistency
(logp_gap between sampler and trainer) and staleness (learner step minus the sampling weights' step,
per trained token, and the truncated fraction of the importance weights). The PNG panel figure is
drawn from the same rows.
"""

from __future__ import annotations

import json
from pathlib import Path

from bugfix_rl.evaluate.evaluate import behaviour_stats

PANELS = {
    "outcome": ("reward", "pass_rate", "exploit"),
    "behaviour": ("reads", "tests", "edits", "turns", "malformed", "failed"),
    "optimizer": ("entropy", "zero_adv_frac", "approx_kl", "clip_frac", "grad_norm", "nonfinite_skips"),
    "consistency": ("logp_gap", "logp_gap_mean", "logp_gap_p99"),
    "staleness": ("staleness_mean", "staleness_max", "tis_truncated_frac"),  # drawn when a run has either
}
CONSOLE_KEYS = ("reward", "reads", "tests", "entropy", "zero_adv_frac", "approx_kl", "clip_frac", "grad_norm",
                "logp_gap")
ASYNC_KEYS = ("staleness_mean", "tis_truncated_frac")  # added to the console row when max_staleness > 0


def dashboard_row(step: int, rollouts, update_metrics: dict, extra: dict) -> dict:
    """Everything SPEC §4 asks for at one step."""
    row = {"step": step}
    row.update(behaviour_stats(rollouts.kept))
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

    def close(self) -> None:
        self.file.close()


class WandbLogger:
    """Sends the same rows to wandb (offline by default: no network needed)."""

    def __init__(self, cfg, run_dir: Path, config: dict):
        import wandb  # imported only when selected: it costs ~0.8 s at start-up

        self.run = wandb.init(project=cfg.wandb_project, mode=cfg.wandb_mode, dir=str(run_dir), config=config,
                              reinit=True)

    def log(self, row: dict) -> None:
        self.run.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=row["step"])

    def close(self) -> None:
        self.run.finish()


def read_metrics(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _has_staleness(rows: list[dict]) -> bool:
    return any(r.get("staleness_max", 0) > 0 or r.get("tis_truncated_frac") is not None for r in rows)


def plot_dashboard(rows: list[dict], path: Path, title: str = "") -> Path:
    """The panel PNG: outcome, behaviour, optimizer state, sampler-trainer consistency, and staleness
    when the run has any (`_has_staleness`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {name: keys for name, keys in PANELS.items() if name != "staleness" or _has_staleness(rows)}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8))
    steps = [r["step"] for r in rows]
    for ax, (panel, keys) in zip(axes, panels.items()):
        for key in keys:
            values = [r.get(key) for r in rows]
            if all(v is None for v in values):
                continue
            ax.plot(steps, [float("nan") if v is None else v for v in values], label=key)
        if panel == "consistency":
            ax.set_yscale("symlog", linthresh=1e-8)
        ax.set_title(panel)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
