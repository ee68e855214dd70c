"""The live console view of a run: preflight table, progress bar, a dashboard row every few steps; and
the progress of the long phases before it (building the RL base, the SFT warm-up)."""

from __future__ import annotations

import time
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from bugfix_rl.dashboard import ASYNC_KEYS, CONSOLE_KEYS


def _bar_columns(label: str) -> tuple:
    """label, bar, done/total, a status text, elapsed, ETA."""
    return (TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(), TimeRemainingColumn())


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


class TrainConsole:
    def __init__(self, cfg, enabled: bool = True):
        self.cfg, self.enabled = cfg, enabled
        self.console = Console(highlight=False)
        self.every = max(cfg.logger.every, 1)
        self._progress = None

    def print(self, *args) -> None:
        if self.enabled:
            (self._progress.console if self._progress else self.console).print(*args)

    def preflight(self, checks: dict) -> None:
        table = Table(title=f"preflight: {len(checks)} checks", show_lines=False)
        for column in ("", "check", "value", "bound"):
            table.add_column(column)
        for name, c in checks.items():
            table.add_row("pass" if c["ok"] else "[red]FAIL[/red]", name + (" *" if c.get("note") else ""),
                          f"{c['value']:.3g}", c["bound"])
        self.print(table)
        notes = sorted({c["note"] for c in checks.values() if c.get("note")})
        for note in notes:
            self.print(f"* {note}")

    @contextmanager
    def progress(self, total: int, start: int = 0):
        if not self.enabled:
            yield lambda row: None
            return
        with Progress(*_bar_columns("train"), console=self.console, transient=False) as progress:
            self._progress = progress
            task = progress.add_task("train", total=total, completed=start, status="")

            def advance(row: dict) -> None:
                progress.update(task, advance=1, status=f"reward {row['reward']:.3f} entropy {row.get('entropy', 0):.3f}")

            yield advance
            self._progress = None

    def row(self, row: dict) -> None:
        if row["step"] % self.every == 0 or row["step"] + 1 == self.cfg.steps:
            keys = CONSOLE_KEYS + (ASYNC_KEYS if self.cfg.rollout.max_staleness > 0 else ())
            self.print(f"step {row['step']:3d} | " + " | ".join(f"{k} {_fmt(row.get(k))}" for k in keys))

    def checkpoint(self, step: int, val: dict) -> None:
        lo, hi = val["ci"]
        self.print(f"[cyan]checkpoint {step:3d}[/cyan] validation pass@1 {val['pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}]"
                   f" ({val['tasks']} tasks x {val['n']} episodes) per task {val['per_task']}")

    def final(self, result: dict) -> None:
        self.print(f"chosen checkpoint: step {result['chosen_step']} (best validation, ties -> earliest)")
        test = result.get("test")
        if test:
            for name in ("base", "chosen"):
                t = test[name]
                self.print(f"test {name:<6} pass@1 {t['pass_at_1']:.3f} [{t['ci'][0]:.3f}, {t['ci'][1]:.3f}]"
                           f" pass@4 {t.get('pass_at_4', float('nan')):.3f} pass@8 {t.get('pass_at_8', float('nan')):.3f}"
                           f" per task {t['per_task']} ({t['tasks']} tasks x {t['n']}, seed {self.cfg.seed})")
            d = test["paired_diff"]
            self.print(f"chosen - base, paired over {d['tasks']} test tasks: {d['diff']:+.3f}"
                       f" [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]")


class PhaseProgress:
    """A long phase that would otherwise be silent (building the RL base, the SFT warm-up), on stderr:
    one line saying what is built and why, a progress bar with an ETA per stage, then `<done> in N s`.

    The bars are drawn only when `bars` (logger.console) is set and stderr is a terminal; the first and
    last lines always. Advancing a bar reads nothing from the work it reports on beyond what it is
    handed, so the work's result does not depend on whether a bar is shown.
    """

    def __init__(self, bars: bool = True, console: Console | None = None):
        self.console = console or Console(stderr=True, highlight=False)
        self.bars = bars and self.console.is_terminal

    @contextmanager
    def phase(self, announcement: str, done: str = "built"):
        self.console.print(announcement, soft_wrap=True, markup=False, highlight=False)
        start = time.perf_counter()
        yield self
        self.console.print(f"{done} in {time.perf_counter() - start:.1f} s", markup=False, highlight=False)

    @contextmanager
    def stage(self, label: str, total: int):
        """Yields advance(status=""): one of `total` units done, `status` shown beside the bar."""
        if not self.bars:
            yield lambda status="": None
            return
        with Progress(*_bar_columns(label), console=self.console, transient=False) as progress:
            task = progress.add_task(label, total=total, status="")
            yield lambda status="": progress.update(task, advance=1, status=status)


def print_outcome(result: dict, run_dir) -> None:
    """A run's last lines, printed even with logger.console=false: the chosen checkpoint's pass@1 with
    its 95% task-bootstrap interval (test, else validation) and the folder that holds the results."""
    step = result["chosen_step"]
    if "test" in result:
        split, score = "test", result["test"]["chosen"]
    else:
        split, score = "validation", result["validation"][str(step)]
    lo, hi = score["ci"]
    print(f"chosen checkpoint: step {step}, {split} pass@1 {score['pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}]")
    print(f"run dir: {run_dir}")
