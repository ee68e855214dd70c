#!/usr/bin/env bash
# Mutation testing of the loss math and the statistics (issue: "loss math that mutations can't slip
# past"): mutmut mutates algo/advantages.py, algo/objective.py and evaluate/stats.py ([tool.mutmut] in
# pyproject.toml) and runs each mutant against the unit tests that cover it. Prints mutmut's summary;
# `mutmut results` lists the survivors, `mutmut show <name>` shows one. Results: docs/ALGORITHMS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
# mutmut forks each mutant's test run from a process that has run torch: with an OpenMP thread pool
# started there, the forked child deadlocks in its first parallel region and every such mutant would
# be reported as a "timeout". One thread means no pool, so no spurious hangs.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
$BIN/python -c "import mutmut" 2>/dev/null || $BIN/python -m pip install --quiet "mutmut>=3.3"
rm -rf mutants
$BIN/mutmut run --max-children "${MUTATION_JOBS:-2}"
$BIN/mutmut results --all true > mutants/results.txt || true
grep -c ": killed" mutants/results.txt | sed 's/^/killed: /' || true
grep -v ": killed" mutants/results.txt || true
