"""Print the coverage table of the intervals we print (docs/STATISTICS.md): `python scripts/coverage_table.py [repeats]`.

Each cell simulates `repeats` evaluations (default 10000) from evaluate/coverage.py's gym model and
counts how often the printed 95% interval holds the true value. About a minute on 2 cores.
"""

import sys

import bugfix_rl  # noqa: F401  (pins the CPU kernels before torch loads)
from bugfix_rl.evaluate.coverage import coverage_table, table_markdown

if __name__ == "__main__":
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    print(table_markdown(coverage_table(repeats=repeats)))
