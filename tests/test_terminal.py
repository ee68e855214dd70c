"""Piped output is not cut at 80 columns (issue 38: report tables read "0.2…" unless COLUMNS=200)."""

from __future__ import annotations

import json
import subprocess
import sys

from rich.table import Table

from bugfix_rl.present.terminal import PIPE_COLUMNS, output_console


def test_a_console_that_is_not_a_terminal_is_wide(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)
    console = output_console()
    assert not console.is_terminal and console.width == PIPE_COLUMNS
    table = Table()
    for column in range(12):
        table.add_column(f"column number {column}")
    table.add_row(*(f"0.{column:03d} [0.011, 0.537]" for column in range(12)))
    console.print(table)
    printed = capsys.readouterr().out
    assert "…" not in printed and "0.011 [0.011, 0.537]" in printed
    monkeypatch.setenv("COLUMNS", "90")  # still the user's to set
    assert output_console().width == 90


def test_report_piped_to_a_file_keeps_its_cells_whole(tmp_path):
    for arm, seed, per_task in (("env.reward=hidden", 0, [1, 2, 0]), ("env.reward=mixed", 0, [2, 2, 1])):
        score = {"per_task": per_task, "n": 2, "tasks_names": ["a", "b", "c"]}
        run = tmp_path / f"{arm}_seed{seed}"
        run.mkdir()
        (run / "eval.json").write_text(json.dumps({"config": {"arm": arm, "seed": seed}, "train": {},
                                                   "test": {"chosen": score, "base": score}}))
    env = {k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}
    result = subprocess.run([sys.executable, "-m", "bugfix_rl.cli", "report", f"dir={tmp_path}"], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout and "│ env.reward=mixed  │" in result.stdout
