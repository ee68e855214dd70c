"""Write docs/RESULTS.md's section 6 (between the switches markers) from a `scripts/switches.sh` sweep.

    .venv/bin/python scripts/switches_section.py <sweep dir> [seconds]

The report's table (held-out pass@1 by seed, the seeds-and-tasks interval vs default, MDE) and, per arm,
the training behaviour of the last 5 steps averaged over seeds (metrics.jsonl), which is where each
switch shows what the design review predicts.
"""

import json
import re
import sys
from pathlib import Path

import bugfix_rl  # noqa: F401  (pins the CPU kernels before torch loads)

from bugfix_rl.evaluate.ablation import build_report, table_cells, table_header, verdicts

DOC = Path("docs/RESULTS.md")
LATE = ("reward", "pass_rate", "turns", "edits", "reads", "submitted", "public_hidden_gap", "length_fail_p50",
        "length_pass_p50", "tasks_with_gradient")
PREDICTED = {
    "partial": "q8: reward climbs on partial fixes while full solves lag",
    "mixed": "q8's remedy: full success dominates, close to default",
    "flaky": "q9: flips shrink the signal (x (1 - 2f) per test), learning slows; success is scored on true outcomes",
    "step_penalty": "q12: too high, submitting at once pays best: turns and pass rate collapse",
    "grade": "q13: unsubmitted fixes are paid, so submitting matters less",
}


def late_means(run_dir: Path, window: int = 5) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-window:]
    out = {}
    for key in LATE:
        values = [r[key] for r in rows if r.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    return out


def section(root: Path, seconds: str) -> list[str]:
    report = build_report(root, "default")
    header = table_header(report)
    lines = [f"## 6. Reward switches (design review q7-q13; {len(report.rows[0].seeds)} seeds per arm, 30 steps,"
             f" {report.tasks} held-out tasks x {report.episodes} episodes)", "",
             f"Sweep dir: `{root}`. Command: `bash scripts/switches.sh` (`bugfix-rl train +exp=ablation"
             " +ablation=default,partial,mixed,flaky,step_penalty,grade seed=0,1,2 -m`), "
             f"{len(report.runs)} runs in {seconds} s on 2 cores. Held-out pass@1 is the true hidden-test"
             " success whatever the training reward.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(table_cells(report, row)) + " |" for row in report.rows]
    lines += [""] + verdicts(report) + ["", "Training behaviour, last 5 steps, mean of seeds:", "",
                                        "| arm | predicted | " + " | ".join(LATE) + " |", "|" + "---|" * (len(LATE) + 2)]
    for row in report.rows:
        runs = [r for r in report.runs if r.arm == row.arm]
        means = [late_means(r.path) for r in runs]
        cells = []
        for key in LATE:
            values = [m[key] for m in means if m[key] is not None]
            cells.append(f"{sum(values) / len(values):.2f}" if values else "-")
        lines.append(f"| {row.arm} | {PREDICTED.get(row.arm, 'reference')} | " + " | ".join(cells) + " |")
    lines += ["", f"Leakage canary: on in all {len(report.runs)} runs (the default); none stopped, so no hidden-test"
              " input reached an observation (tests/test_rewards.py shows it stopping a batch from an env that"
              " leaks one).", ""]
    return lines


if __name__ == "__main__":
    root, seconds = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "?"
    body = "\n".join(section(root, seconds))
    text = DOC.read_text()
    block = f"<!-- switches:begin -->\n{body}\n<!-- switches:end -->"
    if "<!-- switches:begin -->" in text:
        text = re.sub(r"<!-- switches:begin -->.*?<!-- switches:end -->", lambda m: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text)
    print(f"wrote section 6 of {DOC} from {root}")
