"""Progress of the long phases that would otherwise be silent (building the RL base, the SFT warm-up).
Depends on rich only, so any stage can report through it."""

from __future__ import annotations

import time
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def bar_columns(label: str) -> tuple:
    """label, bar, done/total, a status text, elapsed, ETA."""
    return (TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(), TimeRemainingColumn())


class PhaseProgress:
    """A long phase that would otherwise be silent (building the RL base, the SFT warm-up), on stderr:
    one line saying what is built and why, a progress bar with an ETA per stage, then `<done> in N s`.

    The bars are drawn only when `bars` (logger.console) is set and stderr is a terminal; the first and
    last lines unless `lines` is off (phases a user asked to be quiet about). Advancing a bar reads
    nothing from the work it reports on beyond what it is handed, so the work's result does not depend
    on whether a bar is shown.
    """

    def __init__(self, bars: bool = True, console: Console | None = None, lines: bool = True):
        self.console = console or Console(stderr=True, highlight=False)
        self.bars = bars and self.console.is_terminal
        self.lines = lines

    @contextmanager
    def phase(self, announcement: str, done: str = "built"):
        if self.lines:
            self.console.print(announcement, soft_wrap=True, markup=False, highlight=False)
        start = time.perf_counter()
        yield self
        if self.lines:
            self.console.print(f"{done} in {time.perf_counter() - start:.1f} s", markup=False, highlight=False)

    @contextmanager
    def stage(self, label: str, total: int):
        """Yields advance(status=""): one of `total` units done, `status` shown beside the bar."""
        if not self.bars:
            yield lambda status="": None
            return
        with Progress(*bar_columns(label), console=self.console, transient=False) as progress:
            task = progress.add_task(label, total=total, status="")
            yield lambda status="": progress.update(task, advance=1, status=status)
