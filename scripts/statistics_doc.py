"""Refresh docs/STATISTICS.md's generated blocks: the coverage tables (regimes where they fail included) and `bugfix-rl plan` on the newest
ablation sweep under outputs/reproduce/ (`make docs` runs it after scripts/reproduce.sh).

    .venv/bin/python scripts/statistics_doc.py [ablation sweep dir]
"""

import re
import sys
from pathlib import Path

import bugfix_rl  # noqa: F401  (pins the CPU kernels before torch loads)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coverage_table import replaced_cells  # noqa: E402  (a sibling script)

from bugfix_rl.config import PlanConfig  # noqa: E402
from bugfix_rl.evaluate.coverage import coverage_table, regime_cells, table_markdown  # noqa: E402
from bugfix_rl.commands.plan import plan_lines  # noqa: E402

DOC = Path("docs/STATISTICS.md")


def splice(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{DOC}: no {name} markers")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


if __name__ == "__main__":
    sweeps = sorted(Path("outputs/reproduce").glob("*/ablation"))
    sweep = Path(sys.argv[1]) if len(sys.argv) > 1 else (sweeps[-1] if sweeps else None)
    if sweep is None:
        raise SystemExit("no ablation sweep: run scripts/reproduce.sh first")
    text = DOC.read_text()
    text = splice(text, "coverage", table_markdown(coverage_table(repeats=10_000)))
    text = splice(text, "replaced", table_markdown(replaced_cells()))
    text = splice(text, "regimes", table_markdown(regime_cells(repeats=10_000)))
    lines = plan_lines(PlanConfig(dir=str(sweep)))
    text = splice(text, "plan", "```\n$ bugfix-rl plan dir=" + str(sweep) + "\n" + "\n".join(lines) + "\n```")
    DOC.write_text(text)
    print(f"refreshed {DOC} (coverage, replaced intervals, plan on {sweep})")
