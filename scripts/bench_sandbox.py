"""Sandboxed runs per second: the warm fork server vs a fresh `python -I -S -B` process per run.

    python scripts/bench_sandbox.py                  # both designs, grading and test-run workloads
    python scripts/bench_sandbox.py --jobs 200 --repeats 3
    python scripts/bench_sandbox.py --outcomes-table outcomes.jsonl   # docs/SANDBOX.md payload table
    python scripts/bench_sandbox.py --against ac71f44       # a commit (a temporary worktree) or a checkout dir

Both designs run the same two workloads over the same number of parallel workers, in the same
process, best of --repeats: `grade` = import a one-function module and call it on 6 inputs;
`tests` = collect and run a 6-test file. The baseline copies the files into a fresh temp dir and
starts the real interpreter binary (never a pyenv shim) with rlimits set before the job's code,
which is the book's design. The machine's load average is printed because a shared 2-core machine
varies by up to 2x; the ratio, measured in one run, is the stable figure.

--against CHECKOUT times this checkout's sandbox against the `bugfix_rl.sandbox` of another checkout
(its fork servers run that checkout's code), both alive in this process, their rounds interleaved so
that a change in the machine's load hits both alike. CHECKOUT is a directory, or a git revision of
this repository, checked out into a temporary worktree for the run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bugfix_rl.sandbox import Sandbox, SandboxConfig
from bugfix_rl.sandbox.sandbox import _interpreter

SOURCE = "def share(amount, people):\n    if people == 0:\n        return 0\n    return amount // people\n"
INPUTS = [(4, 2), (1, 0), (9, 3), (7, 2), (0, 5), (100, 7)]
EXPECTED = [0 if people == 0 else amount // people for amount, people in INPUTS]
TESTS = "from share import share\n" + "".join(f"\n\ndef test_{i}():\n    assert share{args} == {want}\n"
                                               for i, (args, want) in enumerate(zip(INPUTS, EXPECTED)))

# The baseline's in-process runner: rlimits first, then the job (same limits as SandboxConfig()).
BASELINE_RUNNER = """
import resource, sys, os
for which, value in ((resource.RLIMIT_CPU, 5), (resource.RLIMIT_AS, 1 << 30), (resource.RLIMIT_FSIZE, 1 << 20),
                     (resource.RLIMIT_NPROC, 32)):
    resource.setrlimit(which, (value, value))
sys.path.insert(0, os.getcwd())
if sys.argv[1] == "grade":
    from share import share
    out = []
    for args in %r:
        try:
            out.append(repr(share(*args)))
        except Exception as error:
            out.append(type(error).__name__)
    print(out)
else:
    import test_share
    tests = [f for name, f in vars(test_share).items() if name.startswith("test")]
    failed = 0
    for test in tests:
        try:
            test()
        except Exception:
            failed += 1
    print(f"{len(tests) - failed} passed, {failed} failed")
""" % (INPUTS,)


def baseline_run(kind: str) -> None:
    directory = tempfile.mkdtemp(prefix="bench-baseline-")
    try:
        for name, text in (("share.py", SOURCE), ("test_share.py", TESTS)):
            with open(os.path.join(directory, name), "w") as handle:
                handle.write(text)
        done = subprocess.run([_interpreter(), "-I", "-S", "-B", "-c", BASELINE_RUNNER, kind], cwd=directory,
                              capture_output=True, timeout=5, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        assert done.returncode == 0 and done.stdout, done.stderr
    finally:
        shutil.rmtree(directory)


def rate(run_one, jobs: int, workers: int, repeats: int) -> float:
    """Best runs/s over `repeats` rounds of `jobs` runs spread over `workers` threads."""
    best = 0.0
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: run_one(), range(2 * workers)))  # warm-up
        for _ in range(repeats):
            started = time.perf_counter()
            list(pool.map(lambda _: run_one(), range(jobs)))
            best = max(best, jobs / (time.perf_counter() - started))
    return best


def sandbox_rates(jobs: int, workers: int, repeats: int) -> tuple[dict, dict[str, float]]:
    files = {"share.py": SOURCE, "test_share.py": TESTS}
    with Sandbox(SandboxConfig(workers=workers)) as sandbox:
        def grade_one():
            assert sandbox.call_function({"share.py": SOURCE}, "share", "share", INPUTS).status == "ok"

        def tests_one():
            assert sandbox.run_tests(files, "pytest").exit_code == 0

        return sandbox.layers, {"grade": rate(grade_one, jobs, workers, repeats),
                                "tests": rate(tests_one, jobs, workers, repeats)}


def load_sandbox_package(checkout: str):
    """`bugfix_rl.sandbox` of another checkout (e.g. a git worktree of an older commit), imported under
    its own name beside this one's."""
    directory = Path(checkout).resolve() / "src" / "bugfix_rl" / "sandbox"
    spec = importlib.util.spec_from_file_location("baseline_sandbox", directory / "__init__.py",
                                                  submodule_search_locations=[str(directory)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    return package


def side_by_side(checkout: str, jobs: int, workers: int, repeats: int) -> dict[str, dict[str, float]]:
    """Best runs/s of both sandboxes on both workloads, rounds interleaved: {design: {workload: rate}}."""
    baseline = load_sandbox_package(checkout)
    files = {"share.py": SOURCE, "test_share.py": TESTS}
    best = {"this": {"grade": 0.0, "tests": 0.0}, "baseline": {"grade": 0.0, "tests": 0.0}}
    with Sandbox(SandboxConfig(workers=workers)) as ours, \
            baseline.Sandbox(baseline.SandboxConfig(workers=workers)) as theirs, ThreadPoolExecutor(workers) as pool:
        runs = {}
        for design, box in (("this", ours), ("baseline", theirs)):
            runs[design, "grade"] = lambda box=box: box.call_function({"share.py": SOURCE}, "share", "share", INPUTS)
            runs[design, "tests"] = lambda box=box: box.run_tests(files, "pytest")
        for run in runs.values():  # warm-up, and both must work
            assert all(r.status == "ok" for r in pool.map(lambda _: run(), range(2 * workers)))
        for _ in range(repeats):
            for (design, workload), run in runs.items():
                started = time.perf_counter()
                list(pool.map(lambda _: run(), range(jobs)))
                best[design][workload] = max(best[design][workload], jobs / (time.perf_counter() - started))
        layers = ", ".join(name for name, on in ours.layers.items() if on), \
            ", ".join(name for name, on in theirs.layers.items() if on)
    print(f"layers here: {layers[0]}\nlayers in {checkout}: {layers[1]}")
    return best


@contextlib.contextmanager
def checkout_of(against: str):
    """`against` itself when it is a directory, else a temporary worktree of that git revision."""
    if os.path.isdir(against):
        yield against
        return
    repo = str(Path(__file__).resolve().parents[1])
    directory = tempfile.mkdtemp(prefix="bench-against-")
    subprocess.run(["git", "-C", repo, "worktree", "add", "--detach", "--force", directory, against],
                   check=True, capture_output=True)
    try:
        yield directory
    finally:
        subprocess.run(["git", "-C", repo, "worktree", "remove", "--force", directory], capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def real_pytest_ms() -> float:
    """One fresh `python -m pytest` run of the same test file (why the sandbox has its own collector)."""
    directory = tempfile.mkdtemp(prefix="bench-pytest-")
    try:
        for name, text in (("share.py", SOURCE), ("test_share.py", TESTS)):
            with open(os.path.join(directory, name), "w") as handle:
                handle.write(text)
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_share.py"],
                           cwd=directory, capture_output=True, check=True)
            best = min(best, time.perf_counter() - started)
        return best * 1e3
    finally:
        shutil.rmtree(directory)


def outcomes_table(path: str) -> str:
    """Markdown payload x placement table from the JSON lines test_sandbox_adversarial.py appends."""
    rows = [json.loads(line) for line in open(path)]
    lines = ["| payload | in | test run (status, exit) | grade status | reward | flags | contained by |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        flags = ", ".join(row["grade_flags"] + row["probe_flags"]) or "-"
        lines.append(f"| {row['payload']} | {row['placement']} | {row['run_status']}, {row['exit_code']} | "
                     f"{row['grade_status']} | {row['reward']} | {flags} | {row['contained_by']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=400, help="runs per measured round")
    parser.add_argument("--workers", type=int, default=2, help="parallel workers for both designs")
    parser.add_argument("--repeats", type=int, default=5, help="rounds; the best is reported")
    parser.add_argument("--outcomes-table", metavar="JSONL", help="print the adversarial outcome table and exit")
    parser.add_argument("--against", metavar="CHECKOUT", help="time this sandbox against another checkout's")
    args = parser.parse_args()
    if args.outcomes_table:
        print(outcomes_table(args.outcomes_table))
        return
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cores: {os.cpu_count()}; "
          f"CPU: {cpu_model()}")
    if args.against:
        with checkout_of(args.against) as checkout:
            best = side_by_side(checkout, args.jobs, args.workers, args.repeats)
        print(f"{'workload':10s} {'this checkout runs/s':>21s} {'baseline runs/s':>16s} {'ratio':>7s}")
        for kind in ("grade", "tests"):
            print(f"{kind:10s} {best['this'][kind]:21.0f} {best['baseline'][kind]:16.0f} "
                  f"{best['this'][kind] / best['baseline'][kind]:6.2f}x")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    layers, sandboxed = sandbox_rates(args.jobs, args.workers, args.repeats)
    baseline = {kind: rate(lambda kind=kind: baseline_run(kind), max(args.jobs // 4, 50), args.workers,
                           args.repeats) for kind in ("grade", "tests")}
    print(f"sandbox layers active: {', '.join(name for name, on in layers.items() if on)}")
    print(f"{'workload':10s} {'fork server runs/s':>20s} {'fresh process runs/s':>22s} {'ratio':>7s}")
    for kind in ("grade", "tests"):
        print(f"{kind:10s} {sandboxed[kind]:20.0f} {baseline[kind]:22.0f} {sandboxed[kind] / baseline[kind]:6.1f}x")
    print(f"real pytest, fresh process, same 6 tests: {real_pytest_ms():.0f} ms per run (1 worker)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
