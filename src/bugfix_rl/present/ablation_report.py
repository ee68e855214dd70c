"""The ablation report as text: the table's header and cells (shared by the console, report.md and the
sweep page), its descriptions, the verdicts and the power block, and report.md with its forest plot.
The numbers are evaluate/ablation.py's (build_report)."""

from __future__ import annotations

from pathlib import Path

from bugfix_rl.evaluate.ablation import ArmRow, Report
from bugfix_rl.evaluate.stats import template_count
from bugfix_rl.present.report_run import SHAPE_SPLIT_TITLES, SPLIT_LABELS, shape_heading


def forest_rows(report: Report) -> list[dict]:
    return [{"label": f"{r.arm} - {report.reference}", "diff": r.diff[0], "lo": r.diff[1], "hi": r.diff[2]}
            for r in report.rows if r.diff is not None]


def _num(value, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def table_cells(report: Report, row: ArmRow) -> list[str]:
    """The ablation table's cells for one arm (shared by the console and report.md)."""
    paired = ("reference" if row.diff is None
              else f"{row.diff[0]:+.3f} [{row.diff[1]:+.3f}, {row.diff[2]:+.3f}]" + ("" if row.seed_aware else " tasks only"))
    mde = "-" if row.diff is None else (_num(row.mde) if row.seed_aware else "n/a (1 seed)")
    return [row.arm, " ".join(str(s) for s in row.seeds), " ".join(f"{v:.3f}" for v in row.per_seed),
            f"{row.mean:.3f}", paired, mde, _num(row.train["late_reward"]), _num(row.train["late_exploit"], ".2f"),
            _num(row.train["final_entropy"]), _num(row.train["sampled_episodes"], ".0f"),
            _num(row.train["seconds_per_step"])]


SCORE_NAMES = {"test": "test", **SPLIT_LABELS}  # source -> column name
SHAPES_COLUMNS = 6  # the shapes table: arm .. MDE (the training columns are the main table's)


def table_header(report: Report, source: str | None = None) -> list[str]:
    score = SCORE_NAMES[source or report.source]
    return ["arm", "seeds", f"{score} pass@1 by seed", "mean", f"vs {report.reference} [95% CI, seeds + tasks]",
            "MDE (80%)", "late reward", "exploit", "entropy", "episodes", "s / step"]


def shape_tables(report: Report) -> list[str]:
    """The new-shape splits this report has a table for, in order: 'shapes', then 'shapes_val'."""
    return [split for split in SHAPE_SPLIT_TITLES if getattr(report, split)]


def shapes_table(report: Report, split: str = "shapes") -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a new-shape table (`split`: 'shapes' or 'shapes_val'): each arm on those tasks,
    compared with the reference by the same seed-and-task interval as the main table, and for generated
    tasks (several per template) by that interval over templates too; empty rows when there is no such table."""
    rows = getattr(report, split) or []
    header, cells = table_header(report, split)[:SHAPES_COLUMNS], [table_cells(report, row)[:SHAPES_COLUMNS] for row in rows]
    if any(row.diff_over_templates for row in rows):
        header.append(f"vs {report.reference} over templates [95% CI]")
        for row, row_cells in zip(rows, cells):
            over = row.diff_over_templates
            row_cells.append("reference" if over is None else f"{over[0]:+.3f} [{over[1]:+.3f}, {over[2]:+.3f}]"
                             + ("" if row.seed_aware else " templates only"))
    return header, cells


def describe_shapes(report: Report, split: str = "shapes") -> str:
    run, (title, what) = report.runs[0], SHAPE_SPLIT_TITLES[split]
    text = (f"{title}: pass@1 on {len(run.tasks[split])} `{split}` tasks (eval.json '{split}',"
            f" chosen checkpoint; {what}), {run.episodes[split]} episodes per task per run; the same"
            f" seeds-and-tasks interval and MDE as above. The first table stays the report's score; this one"
            f" compares the arms on function shapes no arm trained on.")
    if any(row.diff_over_templates for row in getattr(report, split) or []):
        templates = template_count([str(name) for name in run.tasks[split]])
        text += (f" The last column is the same interval with each of the {templates} templates' tasks averaged"
                 f" into one unit: tasks of one template move together, so for a claim about new shapes it is"
                 f" the one to read (docs/STATISTICS.md, 'Where the intervals fail').")
    return text


def describe(report: Report) -> str:
    score = ("held-out tasks (eval.json 'heldout', chosen checkpoint)" if report.source == "heldout"
             else "test tasks (eval.json 'test', chosen checkpoint)")
    return (f"{len(report.runs)} runs, {len(report.rows)} arms; score: pass@1 on {report.tasks} {score},"
            f" {report.episodes} episodes per task per run. The interval vs the reference is a t-interval whose"
            f" variance adds each arm's seed-to-seed variance and the task-to-task variance of the per-task"
            f" differences (Welch-Satterthwaite df; it covered >= 0.94 in docs/STATISTICS.md's simulation);"
            f" MDE is the difference it would detect with 80% power; late reward and exploit use are means of the last 5 training steps, entropy"
            f" is the last step's (nats, policy tokens), episodes are those sampled per run, s / step is the"
            f" training loop's wall-clock per step (sampling + update, evaluations excluded); all averaged over"
            f" seeds.")


def power_lines(power: dict) -> list[str]:
    seed_sd, task_sd = power["seed_sd"], power["task_diff_sd"]
    first = (f"seed sd of an arm mean {_num(seed_sd)}"
             + ("" if seed_sd else " (needs an arm with >= 2 seeds and some spread)")
             + f" | sd of per-task differences {_num(task_sd)}"
             + (f" ({power['task_diff_arm']} vs reference)" if power["task_diff_arm"] else " (needs a second arm)"))
    lines = [first]
    floor = power.get("noise_floor") or {}
    runs = (f"{floor['runs']:.3f} (1.96 sqrt(2) x seed sd, at least the next)" if floor.get("runs")
            else "- (needs an arm with >= 2 seeds)")
    lines.append(f"noise floor (95%, {power['tasks']} tasks x {power['episodes']} episodes): two runs of one arm differ"
                 f" by up to {runs}; two evaluations of one checkpoint by up to {_num(floor.get('evaluations'))}"
                 f" (episode noise alone, mean flip rate {_num(floor.get('mean_flip_rate'))}). A difference between"
                 f" two single runs below the first is noise.")
    if power.get("left_out"):
        lines.append(f"left out of the variance estimates (mean pass@1 at the floor or ceiling): {', '.join(power['left_out'])}")
    for row in power["table"]:
        lines.append(f"effect {row['effect']:.2f}: seeds per arm {_num(row['seeds_per_arm'], 'd')}"
                     f" | paired tasks {_num(row['paired_tasks'], 'd')}"
                     f"  (t-test; the book's z-test: {_num(row['seeds_per_arm_z'], 'd')} | {_num(row['paired_tasks_z'], 'd')})")
    if power.get("components"):
        parts = power["components"]
        lines.append(f"variance parts (pass-rate scale): seed {parts['seed']:.4f}, arm x task {parts['interaction']:.4f},"
                     f" seed x task {parts['seed_task']:.4f}, episodes {parts['episode']:.4f} at {parts['episodes']}")
        lines.append(f"for the seeds-and-tasks interval above, at these {power['tasks']} tasks x {power['episodes']}"
                     " episodes: " + "; ".join(
                         f"effect {row['effect']:.2f} needs {_num(row['design_seeds'], 'd')} seeds per arm"
                         + ("" if row["design_seeds"] else " (not reachable with seeds alone: add tasks)")
                         for row in power["table"]) + " (bugfix-rl plan dir=... sizes other designs)")
    return lines


def verdicts(report: Report) -> list[str]:
    """One markdown bullet per compared arm: its paired difference and what the interval allows one to say."""
    lines = []
    for row in report.rows:
        if row.diff is None:
            continue
        diff, lo, hi = row.diff
        if lo > 0 or hi < 0:
            verdict = (f"the interval excludes 0, so the arm is {'better' if lo > 0 else 'worse'}"
                       f" than the reference by {abs(diff):.2f} (between {min(abs(lo), abs(hi)):.2f} and"
                       f" {max(abs(lo), abs(hi)):.2f})")
        else:
            verdict = (f"the interval includes 0, so {len(row.seeds)} seeds and {report.tasks} tasks cannot tell this"
                       f" arm from the reference; an effect as large as {max(abs(lo), abs(hi)):.2f} is not ruled out")
        verdict += (f"; this design detects {row.mde:.2f} with 80% power" if row.mde is not None
                    else "; one seed: the interval is over tasks only and leaves seed variance out")
        exploit = row.train.get("late_exploit")
        extra = (f"; its late training reward is {row.train['late_reward']:.2f} with exploit use {exploit:.2f}"
                 if exploit is not None and exploit > 0.5 else "")
        lines.append(f"- **{row.arm}**: {diff:+.3f} [{lo:+.3f}, {hi:+.3f}]: {verdict}{extra}.")
    return lines


def write_report(report: Report) -> list[Path]:
    """Write report.md (+ forest_plot.png when there is a comparison) into the sweep dir; their paths."""
    from bugfix_rl.present.plots import forest_plot

    header = table_header(report)
    lines = [f"# Ablation report: {report.root.name}", "", describe(report), "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(table_cells(report, row)) + " |" for row in report.rows]
    rows, written = forest_rows(report), []
    if rows:
        written.append(report.root / "forest_plot.png")
        forest_plot(rows, str(written[-1]), title=f"pass@1 difference vs {report.reference} (95% CI over seeds and tasks)")
        lines += ["", "![forest plot](forest_plot.png)"]
    else:
        lines += ["", "(only the reference arm: no comparison, no forest plot)"]
    for split in shape_tables(report):
        header, cells = shapes_table(report, split)
        lines += ["", f"## {shape_heading(split)}", "", describe_shapes(report, split), "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
    lines += ["", "## Power (alpha 0.05, power 0.8)", "", "```"] + power_lines(report.power) + ["```"]
    lines += ["", "## Runs", ""] + [f"- `{r.path.relative_to(report.root) if r.path != report.root else '.'}`:"
                                    f" arm {r.arm}, seed {r.seed}, pass@1 {r.rates[report.source].mean():.3f}"
                                    for r in sorted(report.runs, key=lambda r: (r.arm, r.seed))]
    if report.notes:
        lines += ["", "Notes:"] + [f"- {note}" for note in report.notes]
    path = report.root / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return [path] + written
