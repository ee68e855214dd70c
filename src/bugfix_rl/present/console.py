"""The live console view of a run: preflight table, progress bar, a dashboard row every few steps, and
its last lines. The long phases before it (building the RL base, the SFT warm-up) report through
`progress.PhaseProgress`."""

from __future__ import annotations

from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bugfix_rl.present.dashboard import ASYNC_KEYS, CONSOLE_KEYS
from bugfix_rl.present.report_run import (SPLIT_LABELS, chosen_on, gain_kept_lines, pass_at_text, split_rates_text,
                                          start_chosen_lines)
from bugfix_rl.present.terminal import output_console
from bugfix_rl.progress import bar_columns


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


class TrainConsole:
    def __init__(self, cfg, enabled: bool = True):
        self.cfg, self.enabled = cfg, enabled
        self.console = output_console()
        self.every = max(cfg.logger.every, 1)
        self._progress = None
        self._task = None

    def print(self, *args) -> None:
        """On stdout; while the training bar is live and stdout is the bar's terminal, through the bar's
        console, which prints above the bar: a rich console writes past a live display's stdout
        redirection, so the rows and checkpoint lines landed on the end of the bar's line (issue 38)."""
        if not self.enabled:
            return
        live = self._progress is not None and self.console.is_terminal
        (self._progress.console if live else self.console).print(*args)

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
        """The training bar with its ETA, on stderr and only when stderr is a terminal (a pipe or a file
        gets the dashboard rows on stdout and no bar)."""
        bar_console = Console(stderr=True, highlight=False)
        if not self.enabled or not bar_console.is_terminal:
            yield lambda row: None
            return
        with Progress(*bar_columns("train"), console=bar_console, transient=False) as progress:
            self._progress = progress
            self._task = task = progress.add_task("train", total=total, completed=start, status="")

            def advance(row: dict) -> None:
                progress.update(task, advance=1, status=f"reward {row['reward']:.3f} entropy {row.get('entropy', 0):.3f}")

            yield advance
            self._progress = self._task = None

    def status(self, text: str) -> None:
        """Replace the text beside the training bar (e.g. while a checkpoint is validated); no-op without one."""
        if self._progress is not None:
            self._progress.update(self._task, status=text)

    def row(self, row: dict) -> None:
        if row["step"] % self.every == 0 or row["step"] + 1 == self.cfg.steps:
            keys = CONSOLE_KEYS + (ASYNC_KEYS if self.cfg.rollout.max_staleness > 0 else ())
            masked = f" | infra_masked {row['infra_masked']}" if row.get("infra_masked") else ""  # algo/infra_mask.py
            self.print(f"step {row['step']:3d} | " + " | ".join(f"{k} {_fmt(row.get(k))}" for k in keys) + masked)

    def checkpoint(self, step: int, val: dict) -> None:
        lo, hi = val["ci"]
        self.print(f"[cyan]checkpoint {step:3d}[/cyan] validation pass@1 {val['pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}]"
                   f" ({val['tasks']} tasks x {val['n']} episodes{split_rates_text(val)}) per task {val['per_task']}")

    def final(self, result: dict) -> None:
        self.print(f"chosen checkpoint: step {result['chosen_step']} (best validation on {chosen_on(result)}, ties -> earliest)")
        test = result.get("test")
        if test:
            for name in ("base", "chosen"):
                t = test[name]
                self.print(f"test {name:<6} pass@1 {t['pass_at_1']:.3f} [{t['ci'][0]:.3f}, {t['ci'][1]:.3f}]"
                           f" pass@4 {pass_at_text(t, 4)} pass@8 {pass_at_text(t, 8)}"
                           f" per task {t['per_task']} ({t['tasks']} tasks x {t['n']}, seed {self.cfg.seed})")
                if t.get("interval_warning"):
                    self.print(f"  warning: {t['interval_warning']}")
            d = test["paired_diff"]
            self.print(f"chosen - base, paired over {d['tasks']} test tasks: {d['diff']:+.3f}"
                       f" [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]")
        for split in SPLIT_LABELS:  # the chosen checkpoint and the start on all tasks of the split
            if split in result:
                for line in start_chosen_lines(result, split, self.cfg.seed):
                    self.print(line)
        for line in gain_kept_lines(result):
            self.print(line)


def print_outcome(result: dict, run_dir) -> None:
    """A run's last lines, printed even with logger.console=false (so a sweep prints them once per run):
    the chosen checkpoint's pass@1 with its 95% interval over tasks (Wilson; test, else validation), with
    the run's arm, seed and sample size, and the folder that holds the results."""
    step = result["chosen_step"]
    if "test" in result:
        split, score = "test", result["test"]["chosen"]
    else:
        split, score = "validation", result["validation"][str(step)]
    lo, hi = score["ci"]
    run = result["config"]
    print(f"chosen checkpoint: step {step}, {split} pass@1 {score['pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}]"
          f" (arm {run['arm']}, seed {run['seed']}, {score['tasks']} tasks x {score['n']} episodes)")
    print(f"run dir: {run_dir}")
