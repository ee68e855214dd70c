"""report.html renders the report's verdicts (bold as <strong>, not `**kl**`) and its power section;
the dashboard's log-scale panel leaves a step's 0 undrawn instead of a line to the floor (issue 38)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bugfix_rl.evaluate.ablation import build_report
from bugfix_rl.present.ablation_report import power_lines
from bugfix_rl.present.dashboard import dashboard_figure
from bugfix_rl.present.viewer import sweep_page


def _run(root: Path, arm: str, seed: int, per_task: list[int], n: int = 4) -> None:
    """One run's eval.json as `train` writes the keys report reads (arm, seed, test scores, training summary)."""
    score = {"per_task": per_task, "n": n, "tasks_names": [f"t{i}" for i in range(len(per_task))]}
    result = {"config": {"arm": arm, "seed": seed}, "test": {"chosen": score, "base": score},
              "train": {"late_reward": 0.5, "late_exploit": 0.0, "final_entropy": 0.2, "sampled_episodes": 64}}
    path = root / f"{arm}_seed{seed}" / "eval.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(result))


def test_report_page_has_bold_verdicts_and_the_power_section(tmp_path):
    for seed, (ref, kl) in enumerate([([1, 2, 3, 0, 4], [2, 3, 4, 1, 4]), ([2, 2, 3, 1, 3], [3, 4, 4, 1, 4])]):
        _run(tmp_path, "default", seed, ref)
        _run(tmp_path, "kl", seed, kl)
    report = build_report(tmp_path, "")
    page = sweep_page(report)
    assert "**" not in page and "<strong>kl</strong>:" in page
    assert "<h2>Power (alpha 0.05, power 0.8)</h2>" in page
    for line in power_lines(report.power):
        assert line.split("(")[0].strip().replace("<", "&lt;").replace(">", "&gt;") in page


def test_log_scale_panel_leaves_zero_values_undrawn():
    rows = [{"step": s, "approx_kl": kl, "clip_frac": clip} for s, (kl, clip) in
            enumerate([(0.01, 0.0), (0.0, 0.1), (0.02, 0.2)])]
    fig = dashboard_figure(rows, "t")
    panel = next(ax for ax in fig.axes if ax.get_title() == "update size")
    assert panel.get_yscale() == "log"
    lines = {line.get_label(): list(line.get_ydata()) for line in panel.get_lines()}
    kl, clip = lines["approx_kl (0 not drawn)"], lines["clip_frac (0 not drawn)"]
    assert kl[0] == 0.01 and math.isnan(kl[1]) and kl[2] == 0.02
    assert math.isnan(clip[0]) and clip[1:] == [0.1, 0.2]
