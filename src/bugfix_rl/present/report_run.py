"""summary.md of one run: the config line, checkpoint table, test report, and the dashboard figure;
and the start-vs-chosen lines of the held-out, `shapes` and `shapes_val` evaluations that the console prints too."""

from __future__ import annotations

from pathlib import Path

from bugfix_rl.evaluate.reliability import reliability_line


def rate_text(summary: dict) -> str:
    """`pass@1 [lo, hi]` of an evaluation summary, three decimals."""
    lo, hi = summary["ci"]
    return f"{summary['pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}]"


def split_rates_text(summary: dict) -> str:
    """A validation's rate per split (eval.val_splits with two: `by_split`), as '; val 0.950 [0.600, 1.000]
    on 5 tasks; shapes_val ...'; '' for one split."""
    return "".join(f"; {split} {rate_text(rate)} on {rate['tasks']} tasks" for split, rate in summary.get("by_split", {}).items())


def pass_at_text(summary: dict, k: int) -> str:
    """pass@k of a pass_rate_summary, or why there is none: it needs k <= n episodes per task."""
    value = summary.get(f"pass_at_{k}")
    return f"{value:.3f}" if value is not None else f"n/a (n={summary['n']}<{k})"


def write_summary(run_dir: Path, result: dict, rows: list[dict]) -> Path:
    cfg = result["config"]
    lines = [f"# {cfg['experiment']} / arm {cfg['arm']} / seed {cfg['seed']}", "",
             f"{cfg['steps']} steps, {cfg['threads']} threads, torch {cfg['versions']['torch']};"
             f" {result['train']['seconds_per_step']:.3f} s per step (sampling + update).", "",
             "![dashboard](dashboard.png)", "", f"## Validation (checkpoint selection, on {chosen_on(result)})", "",
             "| step | pass@1 [95% CI over tasks, Wilson] | per task |", "|---|---|---|"]
    for step, v in result["validation"].items():
        lines.append(f"| {step} | {rate_text(v)}{split_rates_text(v)} | {v['per_task']} (of {v['n']}) |")
    lines += ["", f"Chosen checkpoint: step {result['chosen_step']} (best validation pass@1 on {chosen_on(result)}, ties -> earliest).", ""]
    stop = result.get("stop") or {}
    if stop.get("stopped_at"):
        lines += [f"Stopped early at step {stop['stopped_at']} of {cfg['steps']} ({stop['reason']});"
                  f" {stop['steps_saved']} steps saved.", ""]
    test = result.get("test")
    if test:
        n_tasks = test["paired_diff"]["tasks"]
        lines += ["## Test (evaluated once per reported model)", "",
                  "| model | pass@1 [95% CI] | pass@4 | pass@8 | per task |", "|---|---|---|---|---|"]
        for name in ("base", "chosen"):
            t = test[name]
            lines.append(f"| {name} | {rate_text(t)} | {pass_at_text(t, 4)} | {pass_at_text(t, 8)} |"
                         f" {t['per_task']} (of {t['n']}) |")
        d = test["paired_diff"]
        lines += ["", f"chosen - base, paired over {n_tasks} test tasks: {d['diff']:+.3f}"
                  f" [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] (one seed; the interval, t + MOVER hull, is over tasks, not seeds).",
                  "", "![pass@k of base and chosen](pass_at_k.png)"]
        lines += ["", *(f"- {name}: {reliability_line(test[name], test[name]['tasks'], test[name]['n'])}"
                        for name in ("base", "chosen") if test[name].get("pass_hat_k"))]
    if "heldout" in result:
        lines += ["", f"Held-out (all 10 tasks, chosen checkpoint): pass@1 {rate_text(result['heldout'])}"
                  f" per task {result['heldout']['per_task']} (of {result['heldout']['n']})."]
        if "behaviour" in result["heldout"] and "behaviour" in result.get("heldout_base", {}):
            lines += ["", *tool_table(result["heldout_base"], result["heldout"])]
    for split in SHAPE_SPLIT_TITLES:
        if split in result:
            lines += ["", f"## {shape_heading(split)}", "", *start_chosen_lines(result, split, cfg["seed"]),
                      *(gain_kept_lines(result) if split == "shapes" else []), "",
                      f"Chosen checkpoint per task: {result[split]['per_task']} (of {result[split]['n']})."]
    train = result["train"]
    lines += ["", f"Late training reward (last 5 steps): {train['late_reward']:.3f}; exploit use at the end:"
              f" {train['late_exploit']:.2f}; final entropy {train['final_entropy']:.3f} nats;"
              f" episodes sampled: {train['sampled_episodes']}."]
    path = Path(run_dir) / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def chosen_on(result: dict) -> str:
    """The tasks a run's checkpoint was chosen on (eval.val_splits; runs before it: the book's val):
    'val' or 'val + shapes_val'."""
    return " + ".join(result["config"].get("resolved", {}).get("eval", {}).get("val_splits", ["val"]))


SPLIT_LABELS = {"heldout": "held-out", "shapes": "shapes", "shapes_val": "shapes_val"}  # eval.json key -> printed name
# the new-shape splits -> (title, what their tasks are): how summary.md, the run page and `report` name them
SHAPE_SPLIT_TITLES = {
    "shapes": ("Shapes", "function shapes held out from training"),
    "shapes_val": ("shapes_val", "new function shapes for choosing a recipe"),
}


def shape_heading(split: str) -> str:
    """A new-shape split's section heading: 'Shapes (function shapes held out from training)' and its like."""
    title, what = SHAPE_SPLIT_TITLES[split]
    return f"{title} ({what})"


def start_chosen_lines(result: dict, split: str, seed: int) -> list[str]:
    """The lines for a start-vs-chosen split of eval.json ('heldout', 'shapes', 'shapes_val'): both pass@1 with their
    Wilson intervals, task and episode counts and the run's seed; then chosen - start paired over tasks, and
    over templates for a generated split."""
    chosen, start, d = result[split], result[f"{split}_base"], result[f"{split}_paired_diff"]
    label = SPLIT_LABELS[split]
    return [f"{label} pass@1: chosen {rate_text(chosen)}, start {rate_text(start)}"
            f" ({chosen['tasks']} tasks x {chosen['n']} episodes, seed {seed})",
            f"chosen - start, paired over {d['tasks']} {label} tasks: {d['diff']:+.3f}"
            f" [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] (one seed; t + MOVER hull, over tasks)",
            *over_templates_lines(d, label)]


def over_templates_lines(paired_diff: dict, label: str) -> list[str]:
    """The line for a generated split's gain over its templates (stats.paired_summary_over_templates), when
    eval.json has it: tasks of one template move together, so a claim about new shapes reads this one."""
    over = paired_diff.get("over_templates")
    if not over:
        return []
    lo, hi = over["ci"]
    return [f"chosen - start, paired over the {over['templates']} {label} templates (each one's tasks averaged):"
            f" {over['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}] (one seed; t + MOVER hull, over templates)"]


def gain_kept_lines(result: dict) -> list[str]:
    """The share of the held-out gain kept on the shapes tasks (stats.gain_kept), when both were evaluated."""
    kept = result.get("shapes_gain_kept")
    if not kept:
        return []
    share = "undefined (held-out gain <= 0)" if kept["share"] is None else f"{kept['share']:.2f}"
    (h, h_lo, h_hi), (s, s_lo, s_hi) = kept["heldout"], kept["shapes"]
    return [f"shapes gain / held-out gain: {share} (no interval for the ratio; the two paired intervals:"
            f" held-out {h:+.3f} [{h_lo:+.3f}, {h_hi:+.3f}], shapes {s:+.3f} [{s_lo:+.3f}, {s_hi:+.3f}])"]


# (label, behaviour key) rows of the tool table; per-episode means over the held-out episodes
TOOL_TABLE_ROWS = (
    ("malformed calls", "malformed"), ("failed calls", "failed"),
    ("failed: not_found (old_string absent)", "failed_not_found"), ("failed: not_read", "failed_not_read"),
    ("failed: not_unique", "failed_not_unique"), ("failed: no_change", "failed_no_change"),
    ("failed: file_not_found", "failed_file_not_found"), ("failed: not_available (Bash)", "failed_not_available"),
    ("failed: too_many_calls", "failed_too_many_calls"), ("failed: outside_repo (Write)", "failed_outside_repo"),
    ("failed: too_large", "failed_too_large"), ("failed: bad_file_name (Write)", "failed_bad_file_name"),
    ("failed: too_complex", "failed_too_complex"),
    ("failed: syntax_error (env.check_edit_syntax)", "failed_syntax_error"),
    ("Read calls", "calls_Read"), ("Edit calls", "calls_Edit"), ("Write calls", "calls_Write"),
    ("Bash calls", "calls_Bash"),
    ("share of Edits whose old_string was copied from an earlier observation", "edits_copied_share"),
    ("episodes that end with an answer", "submitted"), ("turns", "turns"),
)


def tool_table(before: dict, after: dict) -> list[str]:
    """The book's tools-lab table (markdown lines): pass@1 with its CI, then per-episode behaviour means."""
    n_tasks = len(before["per_task"])
    lines = [f"| held-out, per episode ({n_tasks} tasks x {before['n']}) | start | after RL |", "|---|---|---|",
             f"| pass@1 [95% CI] | {rate_text(before)} | {rate_text(after)} |"]
    for label, key in TOOL_TABLE_ROWS:
        lines.append(f"| {label} | {tool_value(before['behaviour'], key):.2f} | {tool_value(after['behaviour'], key):.2f} |")
    return lines


def tool_value(behaviour: dict, key: str) -> float:
    """A tool-table number from behaviour means; `edits_copied_share` = copied Edits / all Edits."""
    if key == "edits_copied_share":
        edits = behaviour.get("calls_Edit", 0.0)
        return behaviour.get("edits_copied", 0.0) / edits if edits else 0.0
    return behaviour.get(key, 0.0)
