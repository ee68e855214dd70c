"""Sandboxed runs per second: the warm fork server vs a fresh `python -I -S -B` process per run.

    python scripts/bench_sandbox.py                  # both designs, grading and test-run workloads
    python scripts/bench_sandbox.py --jobs 200 --repeats 3
    python scripts/bench_sandbox.py --outcomes-table outcomes.jsonl   # docs/SANDBOX.md payload table
    python scripts/bench_sandbox.py --against ac71f44       # a commit (a temporary worktree) or a checkout dir
    python scripts/bench_sandbox.py --lifecycle             # latency per job, then a kill -9 storm and its leaks

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

--lifecycle measures each job's latency one at a time (p50, p99), then runs a storm: load threads
keep the workers busy with grading calls, test runs and 0.3 s jobs while a killer sends SIGKILL to
a random server, zygote or running job every --kill-every seconds; afterwards the sandbox must still
grade, and once it is closed nothing may be left: no live process of the storm's servers (every
descendant seen while it ran) or of the sandbox's uids, no sandbox temp dir in the host's temp dir,
no new mount in the host's mount namespace, no new fd in this process. tests/test_sandbox_lifecycle.py
runs a small storm (`storm`, `leaks`) by default.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bugfix_rl.sandbox import Sandbox, SandboxConfig
from bugfix_rl.sandbox.workers import _interpreter

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
    """Best runs/s of both sandboxes on both workloads, rounds interleaved: {design: {workload: rate}};
    best["round_ratios"][workload] holds each round's this/baseline ratio (the rounds are adjacent in
    time, so a change in the machine's load moves both rates of a round alike)."""
    baseline = load_sandbox_package(checkout)
    files = {"share.py": SOURCE, "test_share.py": TESTS}
    best = {"this": {"grade": 0.0, "tests": 0.0}, "baseline": {"grade": 0.0, "tests": 0.0},
            "round_ratios": {"grade": [], "tests": []}}
    with Sandbox(SandboxConfig(workers=workers)) as ours, \
            baseline.Sandbox(baseline.SandboxConfig(workers=workers)) as theirs, ThreadPoolExecutor(workers) as pool:
        runs = {}
        for design, box in (("this", ours), ("baseline", theirs)):
            runs[design, "grade"] = lambda box=box: box.call_function({"share.py": SOURCE}, "share", "share", INPUTS)
            runs[design, "tests"] = lambda box=box: box.run_tests(files, "pytest")
        for run in runs.values():  # warm-up, and both must work
            assert all(r.status == "ok" for r in pool.map(lambda _: run(), range(2 * workers)))
        for _ in range(repeats):
            rates = {}
            for (design, workload), run in runs.items():
                started = time.perf_counter()
                list(pool.map(lambda _: run(), range(jobs)))
                rates[design, workload] = jobs / (time.perf_counter() - started)
                best[design][workload] = max(best[design][workload], rates[design, workload])
            for workload in ("grade", "tests"):
                best["round_ratios"][workload].append(rates["this", workload] / rates["baseline", workload])
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


# ---------------------------------------------------------------- lifecycle: latency, kill -9 storm, leaks

SLOW = "import time\nstarted = time.monotonic()\nwhile time.monotonic() - started < 0.3:\n    pass\nprint('done')\n"
SANDBOX_TEMP_PREFIXES = ("bugfix-rl-sandbox-", "bugfix-rl-stage-")  # what a server may create in the host's temp dir


def latencies(sandbox, kind: str, jobs: int) -> list[float]:
    """Seconds per job, one job at a time (after a short warm-up), sorted."""
    files = {"share.py": SOURCE, "test_share.py": TESTS}
    run = (lambda: sandbox.call_function({"share.py": SOURCE}, "share", "share", INPUTS)) if kind == "grade" \
        else (lambda: sandbox.run_tests(files, "pytest"))
    for _ in range(10):
        assert run().status == "ok"
    times = []
    for _ in range(jobs):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
        assert result.status == "ok", result
    return sorted(times)


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _stat(pid: int | str) -> tuple[int, int, str]:
    """(parent pid, start time in ticks, state) from /proc/<pid>/stat; OSError when it has gone."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return int(fields[1]), int(fields[19]), fields[0]


def _processes() -> dict[int, tuple[int, int, str, int]]:
    """pid -> (parent pid, start time in ticks, state, real uid) of every process in /proc."""
    table = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent, start, state = _stat(entry)
            uid = os.stat(f"/proc/{entry}").st_uid
        except (OSError, IndexError):
            continue
        table[int(entry)] = (parent, start, state, uid)
    return table


def _start_time(pid: int) -> int | None:
    """The process's start time in ticks (as in `_processes`), None when there is no such process."""
    try:
        return _stat(pid)[1]
    except (OSError, IndexError):
        return None


def _host_temp_entries() -> set[str]:
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith(SANDBOX_TEMP_PREFIXES)}


def _host_mounts() -> int:
    with open("/proc/self/mountinfo") as handle:
        return len(handle.readlines())


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class Storm:
    """Load on every worker and SIGKILLs at servers, zygotes and running jobs; records every process
    of the sandbox's servers' trees and every uid the sandbox used, for `leaks` to check afterwards."""

    def __init__(self, sandbox, seconds: float, kill_every_s: float, seed: int = 0, load_threads: int = 3):
        self.sandbox, self.seconds, self.kill_every_s = sandbox, seconds, kill_every_s
        self.rng, self.load_threads = random.Random(seed), load_threads
        self.stop = threading.Event()
        self.seen: dict[int, int] = {}  # pid -> start time: the servers and all their descendants seen
        self.uids: set[int] = set(sandbox.uids)
        self.kills = {"server": 0, "zygote": 0, "job": 0}
        self.schedule = ["server", "job", "zygote", "job"]  # in turn; a kind with no target waits for one
        self.turn = 0
        self.statuses: dict[str, int] = {}
        self.raised: list[str] = []
        self.lock = threading.Lock()
        self.before = {"temp": _host_temp_entries(), "mounts": _host_mounts(), "fds": _fds()}

    def _servers(self) -> set[int]:
        """This sandbox's live servers (a closed or reaped one's pid may be anyone's by now)."""
        return {worker.process.pid for worker in list(self.sandbox._workers)
                if not worker.closed and worker.process.returncode is None}

    def _track(self) -> dict[int, tuple[int, int, str, int]]:
        table = _processes()
        children: dict[int, list[int]] = {}
        for pid, (parent, _, _, _) in table.items():
            children.setdefault(parent, []).append(pid)
        pending = [pid for pid in self._servers() if pid in table]
        while pending:
            pid = pending.pop()
            self.seen.setdefault(pid, table[pid][1])
            pending += children.get(pid, [])
        self.uids.update(self.sandbox.uids)
        return table

    def _load(self, index: int) -> None:
        rng = random.Random(index)
        files = {"share.py": SOURCE, "test_share.py": TESTS}
        while not self.stop.is_set():
            pick = rng.random()
            try:
                if pick < 0.4:
                    status = self.sandbox.call_function({"share.py": SOURCE}, "share", "share", INPUTS).status
                elif pick < 0.7:
                    status = self.sandbox.run_tests(files, "pytest").status
                else:
                    status = self.sandbox.run_tests({"slow.py": SLOW}, "python slow.py").status
            except Exception as error:  # must not happen: a lost server is a job's sandbox_error
                with self.lock:
                    self.raised.append(f"{type(error).__name__}: {error}")
                continue
            with self.lock:
                self.statuses[status] = self.statuses.get(status, 0) + 1

    def _kill_one(self, table: dict) -> None:
        servers = self._servers()
        zygotes = [pid for pid, (parent, _, state, _) in table.items() if parent in servers and state != "Z"]
        # A job is a zygote's child of this sandbox's uids. Not any process of those uids: a killed server's
        # uid is free at once, and another sandbox (a parallel test's) may claim it and run jobs as it
        # before `sandbox.uids` forgets it.
        uids = set(self.sandbox.uids)
        jobs = [pid for pid, (parent, _, state, uid) in table.items()
                if parent in zygotes and uid in uids and state != "Z"]
        kind = self.schedule[self.turn % len(self.schedule)]
        targets = {"server": sorted(servers), "zygote": sorted(zygotes), "job": sorted(jobs)}[kind]
        if targets:
            target = self.rng.choice(targets)
            if _start_time(target) != table[target][1]:  # gone since the table was read, its pid maybe reused
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGKILL)
                self.kills[kind] += 1
                self.turn += 1

    def run(self) -> None:
        threads = [threading.Thread(target=self._load, args=(index,), daemon=True)
                   for index in range(self.load_threads)]
        for thread in threads:
            thread.start()
        started = next_kill = time.monotonic()
        while time.monotonic() - started < self.seconds:
            table = self._track()
            if time.monotonic() >= next_kill:
                self._kill_one(table)
                next_kill += self.kill_every_s
            time.sleep(0.01)
        self.stop.set()
        for thread in threads:
            thread.join()
        self._track()


def leaks(storm: Storm, uids=None, grace_s: float = 2.0, wait_for_zombies: bool = True) -> dict[str, list]:
    """What the storm left once its sandbox is closed (call after `sandbox.close()`): live processes
    it saw (same pid and start time) or of `uids` (default: every uid its sandbox used), zombies among
    the former (dead, waiting for PID 1 to reap them: reported, not leaks), sandbox temp dirs in the
    host's temp dir, mounts and fds added. Waits up to `grace_s` for SIGKILLed processes to go (and
    for PID 1 to reap the zombies, unless told not to). (Under
    a parallel test run, pass uids=(): another sandbox may claim a uid the storm's servers released.)"""
    uids = storm.uids if uids is None else set(uids)
    deadline = time.monotonic() + grace_s
    while True:
        table = _processes()
        live = sorted({pid for pid, start in storm.seen.items()
                       if pid in table and table[pid][1] == start and table[pid][2] != "Z"}
                      | {pid for pid, (_, _, state, uid) in table.items() if uid in uids and state != "Z"})
        temp = sorted(_host_temp_entries() - storm.before["temp"])
        zombies = sorted(pid for pid, start in storm.seen.items()
                         if pid in table and table[pid][1] == start and table[pid][2] == "Z")
        if (not live and not temp and not (zombies and wait_for_zombies)) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return {"processes": live, "zombies": zombies, "files": temp,
            "mounts": [_host_mounts() - storm.before["mounts"]] if _host_mounts() != storm.before["mounts"] else [],
            "fds": [_fds() - storm.before["fds"]] if _fds() > storm.before["fds"] else []}


def lifecycle(jobs: int, workers: int, seconds: float, kill_every_s: float) -> None:
    with Sandbox(SandboxConfig(workers=workers)) as sandbox:
        print(f"sandbox layers active: {', '.join(name for name, on in sandbox.layers.items() if on)}")
        print(f"latency per job, one job at a time on {workers} workers, ms:")
        print(f"{'workload':10s} {'jobs':>6s} {'p50':>7s} {'p99':>7s} {'max':>7s}")
        for kind in ("grade", "tests"):
            times = latencies(sandbox, kind, jobs)
            print(f"{kind:10s} {jobs:6d} {percentile(times, 0.5) * 1e3:7.2f} {percentile(times, 0.99) * 1e3:7.2f} "
                  f"{times[-1] * 1e3:7.2f}")
    sandbox = Sandbox(SandboxConfig(workers=workers, timeout_s=5))
    storm = Storm(sandbox, seconds, kill_every_s)
    try:
        storm.run()
        works = all(result.status == "ok" for result in (
            sandbox.call_function({"share.py": SOURCE}, "share", "share", INPUTS),
            sandbox.run_tests({"share.py": SOURCE, "test_share.py": TESTS}, "pytest")))
    finally:
        sandbox.close()
    found = leaks(storm)
    statuses = ", ".join(f"{status} {count}" for status, count in sorted(storm.statuses.items()))
    print(f"kill -9 storm: {seconds:.0f} s, {storm.load_threads} load threads on {workers} workers, a kill every "
          f"{kill_every_s * 1e3:.0f} ms: {storm.kills['server']} servers, {storm.kills['zygote']} zygotes, "
          f"{storm.kills['job']} running jobs killed; {sum(storm.statuses.values())} jobs ({statuses}); "
          f"{len(storm.raised)} raised; {len(storm.seen)} processes seen")
    print(f"{'after the storm':16s} {'processes':>10s} {'files':>6s} {'mounts':>7s} {'fds':>4s} {'zombies':>8s} "
          f"{'sandbox works':>14s}")
    print(f"{'leaked':16s} {len(found['processes']):10d} {len(found['files']):6d} {sum(found['mounts']):7d} "
          f"{sum(found['fds']):4d} {len(found['zombies']):8d} {'yes' if works else 'NO':>14s}")
    if storm.raised:
        print("raised:", *sorted(set(storm.raised))[:5], sep="\n  ")


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
    parser.add_argument("--lifecycle", action="store_true", help="latency per job, then a kill -9 storm and its leaks")
    parser.add_argument("--storm-s", type=float, default=10.0, help="--lifecycle: seconds of kill -9 storm")
    parser.add_argument("--kill-every", type=float, default=0.05, help="--lifecycle: seconds between kills")
    args = parser.parse_args()
    if args.outcomes_table:
        print(outcomes_table(args.outcomes_table))
        return
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cores: {os.cpu_count()}; "
          f"CPU: {cpu_model()}")
    if args.lifecycle:
        lifecycle(args.jobs, args.workers, args.storm_s, args.kill_every)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    if args.against:
        with checkout_of(args.against) as checkout:
            best = side_by_side(checkout, args.jobs, args.workers, args.repeats)
        print(f"{'workload':10s} {'this checkout runs/s':>21s} {'baseline runs/s':>16s} {'ratio':>7s} "
              f"{'per round: median (min-max)':>28s}")
        for kind in ("grade", "tests"):
            ratios = sorted(best["round_ratios"][kind])
            print(f"{kind:10s} {best['this'][kind]:21.0f} {best['baseline'][kind]:16.0f} "
                  f"{best['this'][kind] / best['baseline'][kind]:6.2f}x "
                  f"{ratios[len(ratios) // 2]:14.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})")
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
