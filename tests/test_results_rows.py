"""scripts/results_rows.py on hand-made eval.json files: the rows per split, and the generated splits' row over
templates (each template's tasks averaged into one unit)."""

from __future__ import annotations

import json

import pytest
import torch
from repo_scripts import load_script

from bugfix_rl.evaluate.ablation import compare_arms

SHAPES = ["minmax/two-caps-aa", "minmax/two-caps-bb", "minmax/two-lines-cc", "zero/chain-dd", "zero/chain-ee",
          "zero/chain-ff"]
HELDOUT = ["minmax/pin", "zero/speed"]


def _eval_json(path, seed: int, base: list[int], chosen: list[int], heldout: tuple[list[int], list[int]],
               names: list[str] = SHAPES) -> str:
    """One run's eval.json as the rows read it: counts of n=4 episodes per task."""
    def result(counts, tasks):
        return {"per_task": counts, "n": 4, "tasks_names": tasks}

    path.mkdir()
    (path / "eval.json").write_text(json.dumps({
        "config": {"seed": seed},
        "shapes_base": result(base, names), "shapes": result(chosen, names),
        "heldout_base": result(heldout[0], HELDOUT), "heldout": result(heldout[1], HELDOUT)}))
    return str(path)


def test_a_generated_split_gets_a_row_over_its_templates(tmp_path):
    bases = [[0, 1, 0, 1, 1, 2], [1, 0, 0, 2, 1, 1]]
    chosen = [[4, 3, 1, 2, 2, 1], [4, 4, 0, 1, 2, 2]]
    script = load_script("results_rows")
    runs = [_eval_json(tmp_path / f"seed{s}", s, bases[s], chosen[s], ([1, 2], [3, 4])) for s in (0, 1)]
    lines = script.rows("r", script.runs_under(runs))
    assert len(lines) == 3  # held-out, shapes, shapes over templates; the held-out names are no templates
    assert lines[0].startswith("| r | 0, 1 | held-out (2 x 4) |") and lines[1].startswith("| r | 0, 1 | shapes (6 x 4) |")

    def by_hand(counts):  # templates minmax/two-caps (2 tasks), minmax/two-lines (1), zero/chain (3)
        return torch.tensor([[(c[0] + c[1]) / 8, c[2] / 4, (c[3] + c[4] + c[5]) / 12] for c in counts],
                            dtype=torch.float64)

    (diff, lo, hi), _, _ = compare_arms(by_hand(chosen), by_hand(bases))
    assert lines[2] == (f"| r | 0, 1 | shapes, over its 3 templates | {float(by_hand(bases).mean()):.3f} |"
                        f" {float(by_hand(chosen).mean()):.3f} | {diff:+.3f} [{lo:+.3f}, {hi:+.3f}] (seeds + templates) |")


def test_runs_that_read_other_shapes_tasks_are_refused(tmp_path):
    script = load_script("results_rows")
    other = SHAPES[:-1] + ["zero/chain-zz"]
    runs = [_eval_json(tmp_path / f"seed{s}", s, [0] * 6, [1] * 6, ([1, 1], [2, 2]), names)
            for s, names in ((0, SHAPES), (1, other))]
    with pytest.raises(SystemExit, match="the runs read different shapes tasks"):
        script.rows("r", script.runs_under(runs))
