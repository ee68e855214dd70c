"""Print the coverage tables of docs/STATISTICS.md: `python scripts/coverage_table.py [repeats]`.

First the intervals we print (each cell: `repeats` simulated evaluations, default 10000, from
evaluate/coverage.py's gym model; the count of intervals that hold the true value), then the
intervals they replaced, on the same model (1000 repeats each: the bootstraps run one at a time), then
the two regimes outside the model where the printed intervals under-cover (`repeats` each).
About 11 s on 2 cores.
"""

import sys

import bugfix_rl  # noqa: F401  (pins the CPU kernels before torch loads)
import torch
from scipy.stats import t as student_t

from bugfix_rl.evaluate.coverage import (Cell, GymModel, coverage_table, regime_cells, simulate_arms,
                                         simulate_one_run, table_markdown)
from bugfix_rl.evaluate.stats import bootstrap_ci, paired_bootstrap_diff


def replaced_cells(repeats: int = 1000) -> list[Cell]:
    model, generator, cells = GymModel(), torch.Generator().manual_seed(7), []
    for tasks in (5, 10, 20):
        rates, truth = simulate_one_run(model, tasks, repeats, generator)
        boot = [bootstrap_ci(r, n_boot=2000, seed=i) for i, r in enumerate(rates)]
        cells.append(Cell("before: percentile bootstrap over tasks, one policy", tasks, 1, 0.0,
                          sum(lo <= truth <= hi for lo, hi in boot) / repeats,
                          sum(hi - lo for lo, hi in boot) / repeats, repeats))
        half = student_t.ppf(0.975, tasks - 1) * (rates.var(-1) / tasks).sqrt()
        mean = rates.mean(-1)
        cells.append(Cell("alternative: t-interval over tasks, one policy", tasks, 1, 0.0,
                          float(((mean - half <= truth) & (truth <= mean + half)).double().mean()),
                          float((2 * half).mean()), repeats))
    for tasks in (5, 10, 20):
        for difference in (0.0, 0.1):
            a, b, truth = simulate_arms(model, tasks, 3, difference, repeats, generator)
            old = [paired_bootstrap_diff(x, y, n_boot=2000, seed=i)[1:] for i, (x, y) in enumerate(zip(a, b))]
            cells.append(Cell("before: seed-averaged task bootstrap, arms", tasks, 3, difference,
                              sum(lo <= truth <= hi for lo, hi in old) / repeats,
                              sum(hi - lo for lo, hi in old) / repeats, repeats))
    return cells


if __name__ == "__main__":
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    print(table_markdown(coverage_table(repeats=repeats)))
    print()
    print(table_markdown(replaced_cells()))
    print()
    print(table_markdown(regime_cells(repeats=repeats)))
