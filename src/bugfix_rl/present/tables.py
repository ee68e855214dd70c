"""Rich console tables for `bugfix-rl eval` and `bugfix-rl report` (printing only; no computation)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from bugfix_rl.evaluate.ablation import Report
from bugfix_rl.evaluate.checkpoint_eval import label_of
from bugfix_rl.evaluate.episodes import failure_lines
from bugfix_rl.evaluate.reliability import reliability_line
from bugfix_rl.present.ablation_report import (describe, describe_shapes, power_lines, shape_tables, shapes_table,
                                               table_cells, table_header)
from bugfix_rl.present.report_run import shape_heading
from bugfix_rl.present.terminal import output_console


def _ci(entry: dict, signed: bool = False) -> str:
    fmt = "+.3f" if signed else ".3f"
    lo, hi = entry["ci"]
    return f"{format(entry.get('value', entry.get('diff')), fmt)} [{format(lo, fmt)}, {format(hi, fmt)}]"


def print_eval(result: dict, console: Console | None = None) -> None:
    """pass@k with CIs, per-task counts and first edits, behaviour stats, top action sequences."""
    console = console or output_console()
    n, tasks = result["n"], result["tasks"]
    models = result["models"]
    names = "AB"[: len(models)]  # short column labels; the legend says which checkpoint is which
    console.print(f"split {result['split']}: {len(tasks)} tasks x {n} episodes per task, eval seed {result['seed']}"
                  f" (95% intervals over tasks: Wilson score for one policy, t + MOVER hull for a difference;"
                  f" docs/STATISTICS.md)")
    for name, m in zip(names, models):
        run = m["run"]
        console.print(f"  {name} = {label_of(m)}: step {m['step']}, run {run['experiment']} / arm {run['arm']} /"
                      f" seed {run['seed']}, env {run['env']} (reward {run['reward']}), temperature {m['temperature']:g}")

    summary = Table(title="pass@k")
    summary.add_column("")
    for k in models[0]["pass_at_k"]:
        summary.add_column(f"pass@{k} [95% CI]")
    for name, m in zip(names, models):
        summary.add_row(name, *(_ci(v) for v in m["pass_at_k"].values()))
    console.print(summary)
    for name, m in zip(names, models):
        line = reliability_line(m, len(tasks), n)
        console.print(f"{name}: {line}" if line else f"{name}: pass^k and flip rate need n >= 2 episodes per task")
        if m.get("interval_warning"):
            console.print(f"{name}: warning: {m['interval_warning']}")
        if m.get("infra_failed"):
            console.print(f"{name}: warning: {m['infra_failed']} of {len(tasks) * n} episodes ended in an infrastructure"
                          f" failure (sandbox_error or env_error) and count as failures above")

    per_task = Table(title="per task: successes of n, most common first edits")
    per_task.add_column("task")
    per_task.add_column("correct op")
    for name in names:
        per_task.add_column(f"{name} passed", justify="right")
        per_task.add_column(f"{name} first edits")
    rows_by_model = [{row["task"]: row for row in m["per_task_table"]} for m in models]
    for i, task in enumerate(tasks):
        cells = [task, rows_by_model[0][task]["correct_op"]]
        for m, rows in zip(models, rows_by_model):
            edits = ", ".join(f"{op} {count}" for op, count in rows[task]["first_edits"].items())
            cells += [f"{m['per_task'][i]}/{n}", edits]
        per_task.add_row(*cells)
    console.print(per_task)

    behaviour = Table(title="behaviour (mean per episode)")
    behaviour.add_column("metric")
    for name in names:
        behaviour.add_column(name, justify="right")
    for key in models[0]["behaviour"]:
        behaviour.add_row(key, *(f"{m['behaviour'].get(key, float('nan')):.3f}" for m in models))
    console.print(behaviour)

    for name, m in zip(names, models):
        sequences = Table(title=f"{name}: most common action sequences")
        sequences.add_column("episodes", justify="right")
        sequences.add_column("sequence")
        for count, sequence in m["sequences"]:
            sequences.add_row(str(count), sequence)
        console.print(sequences)

    for name, m in zip(names, models):
        if "failures" in m:
            console.print(f"{name}: failure analysis (tasks below the threshold; the oracle's rule and episode beside"
                          f" the agent's failing ones)")
            for line in failure_lines(m["failures"]):
                console.print(line, markup=False, highlight=False, soft_wrap=True)

    if "paired_diff" in result:
        d = result["paired_diff"]
        per_task_diffs = " ".join(f"{v:+.2f}" for v in d["per_task"])
        console.print(f"paired difference in pass@1, A - B, over {d['tasks']} tasks on the same seeded stream:"
                      f" {_ci(d, signed=True)}; per task: {per_task_diffs}")
        if "over_templates" in d:
            over = d["over_templates"]
            console.print(f"the same over the {over['templates']} templates (each one's tasks averaged into one unit;"
                          f" for new shapes, read this one): {over['diff']:+.3f} [{over['ci'][0]:+.3f},"
                          f" {over['ci'][1]:+.3f}]")
        e = d["episodes"]
        console.print(f"same {e['episodes']} episodes, paired: A only {e['a_only']}, B only {e['b_only']};"
                      f" difference {e['diff']:+.3f}, paired SE {e['se']:.4f} (unpaired {e['unpaired_se']:.4f}),"
                      f" z {e['z']:+.2f}, McNemar exact p = {e['p_exact']:.3g} (about these {d['tasks']} tasks;"
                      f" the interval above is about new tasks)")


def print_report(report: Report, console: Console | None = None) -> None:
    """The ablation table, then the power calculation."""
    console = console or output_console()
    table = Table(title=f"ablation: {report.root}")
    for column in table_header(report):
        table.add_column(column)
    for row in report.rows:
        table.add_row(*table_cells(report, row))
    console.print(table)
    console.print(describe(report))
    for split in shape_tables(report):
        header, cells = shapes_table(report, split)
        heading = shape_heading(split)
        shapes = Table(title=heading[0].lower() + heading[1:])
        for column in header:
            shapes.add_column(column)
        for row in cells:
            shapes.add_row(*row)
        console.print(shapes)
        console.print(describe_shapes(report, split))
    for note in report.notes:
        console.print(f"note: {note}")
    console.print("power (alpha 0.05, power 0.8):")
    for line in power_lines(report.power):
        console.print("  " + line)
