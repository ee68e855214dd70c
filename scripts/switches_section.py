"""Write docs/RESULTS.md's section 6 (between the switches markers) from a `scripts/switches.sh` sweep.

    .venv/bin/python scripts/switches_section.py <sweep dir> [seconds]

The report's table (held-out pass@1 by seed, the seeds-and-tasks interval vs default, MDE) and, per arm,
the training behaviour of the last 5 steps averaged over seeds (metrics.jsonl), which is where each
switch shows what the design review predicts.
"""

import re
import sys
from pathlib import Path

import bugfix_rl  # noqa: F401  (pins the CPU kernels before torch loads)

from bugfix_rl.evaluate.ablation import build_report
from bugfix_rl.present.ablation_report import table_cells, table_header, verdicts
from bugfix_rl.present.dashboard import read_metrics

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


def key_means(rows: list[dict]) -> dict:
    """Each LATE key's mean over the rows that have it (None where none does)."""
    out = {}
    for key in LATE:
        values = [r[key] for r in rows if r.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    return out


def arm_late(report, arm: str, window: int = 5) -> dict:
    """LATE keys over the last `window` training steps of each of the arm's runs, averaged over its seeds."""
    return key_means([key_means(read_metrics(r.path / "metrics.jsonl")[-window:])
                      for r in report.runs if r.arm == arm])


def observations(late: dict, held_out: dict) -> list[str]:
    """What each switch did here, in numbers (training: last 5 steps; held_out: arm -> per-seed pass@1),
    next to what the review predicts."""
    ref = late["default"]
    lines = []
    if "partial" in late:
        p = late["partial"]
        lines.append(f"- **partial**: training pass rate {p['pass_rate']:.2f} (default {ref['pass_rate']:.2f}). The"
                     " plateau of q8 needs a cheaper partial fix to settle for; the edit menu's bugs are one-op fixes,"
                     " where a wrong op rarely passes many hidden tests, so "
                     + ("full solves did not lag here." if p["pass_rate"] >= ref["pass_rate"] - 0.05
                        else "full solves lagged, as predicted."))
    if "mixed" in late:
        m = late["mixed"]
        lines.append(f"- **mixed**: reward {m['reward']:.2f} (up to 1.1), pass rate {m['pass_rate']:.2f}: full success"
                     " dominates, as intended.")
    if "flaky" in late:
        f = late["flaky"]
        lines.append(f"- **flaky** (10% per test): reward {f['reward']:.2f} against a true pass rate of {f['pass_rate']:.2f};"
                     " a verdict of 5-7 hidden tests survives the flips with probability 0.9^5 = 0.59 to 0.9^7 = 0.48."
                     " Groups with a"
                     f" gradient: {f['tasks_with_gradient']:.1f} of 8 per step against the default's"
                     f" {ref['tasks_with_gradient']:.1f}: the noise gives solved tasks a spread of rewards to 'learn' from,"
                     f" which is q9's added variance. Training pass rate {f['pass_rate']:.2f} against"
                     f" {ref['pass_rate']:.2f}; on the held-out tasks the interval above cannot tell the arms apart.")
    if "step_penalty" in late:
        s = late["step_penalty"]
        seeds = held_out["step_penalty"]
        collapsed = sum(v < 0.3 for v in seeds)
        lines.append(f"- **step_penalty** (0.4 per turn): turns {s['turns']:.2f} (default {ref['turns']:.2f}), edits"
                     f" {s['edits']:.2f}, training pass rate {s['pass_rate']:.2f}; held-out pass@1 by seed"
                     f" {' '.join(f'{v:.3f}' for v in seeds)}: {collapsed} of {len(seeds)} seeds learned q12's collapse"
                     " (submit with little or no work), the rest paid the penalty and kept solving. The seed spread"
                     " is why the interval above, which holds it, still includes 0. (At 0.2 per turn no seed"
                     " collapsed: the RL base's attempts already paid more than an immediate submit.)")
    if "grade" in late:
        g = late["grade"]
        lines.append(f"- **grade**: submitted {g['submitted']:.2f} of episodes (default {ref['submitted']:.2f}), turns"
                     f" {g['turns']:.2f} (default {ref['turns']:.2f}), training pass rate {g['pass_rate']:.2f}: "
                     + ("once an unsubmitted fix is paid, submitting stops mattering and the agent often runs out the"
                        " turns after its edit, as q13 predicts; success is scored on the final code."
                        if g["submitted"] < ref["submitted"] - 0.1 else "submitting did not change much here."))
    return lines


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
    late = {row.arm: arm_late(report, row.arm) for row in report.rows}
    for row in report.rows:
        cells = ["-" if late[row.arm][key] is None else f"{late[row.arm][key]:.2f}" for key in LATE]
        lines.append(f"| {row.arm} | {PREDICTED.get(row.arm, 'reference')} | " + " | ".join(cells) + " |")
    lines += [""] + observations(late, {row.arm: row.per_seed for row in report.rows})
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
