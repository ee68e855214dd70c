"""Plots for evaluation reports (file output only; Agg backend, no display needed)."""

from __future__ import annotations

from pathlib import Path


def _save(fig, ax, path, title: str) -> None:
    """Title, tight layout and the PNG (parent folders created)."""
    if title:
        ax.set_title(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")


def forest_plot(rows: list[dict], path: str, title: str = "") -> None:
    """Save a forest plot of differences with their intervals as a PNG.

    Args:
        rows: one dict per comparison, {"label": str, "diff": float, "lo": float, "hi": float};
            drawn top to bottom in the given order.
        path: output PNG path; parent folders are created.
        title: optional figure title.
    """
    if not rows:
        raise ValueError("forest_plot needs at least one row")
    import matplotlib

    matplotlib.use("Agg")  # set here so importing this module never changes the caller's backend
    import matplotlib.pyplot as plt

    labels = [str(row["label"]) for row in rows]
    diffs = [float(row["diff"]) for row in rows]
    lower_err = [float(row["diff"]) - float(row["lo"]) for row in rows]
    upper_err = [float(row["hi"]) - float(row["diff"]) for row in rows]
    positions = list(range(len(rows)))[::-1]  # first row at the top

    fig, ax = plt.subplots(figsize=(6.0, 1.0 + 0.4 * len(rows)))
    try:
        ax.axvline(0.0, color="grey", linestyle="--", linewidth=1)
        ax.errorbar(diffs, positions, xerr=[lower_err, upper_err], fmt="o", color="black", capsize=3)
        ax.set_yticks(positions)
        ax.set_yticklabels(labels)
        ax.set_xlabel("difference (with interval)")
        _save(fig, ax, path, title)
    finally:
        plt.close(fig)


def plot_pass_at_k(curves: dict[str, list[float]], path: str | Path, title: str = "") -> None:
    """Save pass@k against k (log-scaled k axis) for each named policy, as a PNG.

    Args:
        curves: name -> [n] task-averaged pass@k for k = 1..n (stats.pass_at_k_curve).
        path: output PNG path; parent folders are created.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.0, 3.5))
    try:
        for name, curve in curves.items():
            ax.plot(range(1, len(curve) + 1), curve, marker="o", markersize=3, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k (samples per task)")
        ax.set_ylabel("pass@k (mean over tasks)")
        ax.set_ylim(0.0, 1.02)
        ax.grid(True, alpha=0.3)
        ax.legend()
        _save(fig, ax, path, title)
    finally:
        plt.close(fig)
