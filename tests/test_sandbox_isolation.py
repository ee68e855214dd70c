"""Nothing of one job reaches another (issue: memory carried between jobs, shared counters).

Memory: a job scans every readable page it can find in its own address space for the marker bytes
that an earlier job carried in its source and in its inputs. Jobs forked from a server that had
handled earlier requests found them (the server's freed heap is inherited by each fork); jobs forked
from the zygote, which never receives a request, must not, whichever kind each job is.

Uids: a server that dies frees its uid at once, while its jobs die a moment later; whoever claims the
uid next must not run beside them.

Counters: system-wide values that one job can change and a concurrent job can read (free memory,
load, free blocks, page-cache residency) must be out of reach.
"""

import os
import secrets
import signal
import time

import pytest

from bugfix_rl.sandbox import Sandbox, SandboxConfig, privileges
from bugfix_rl.sandbox.isolation import LAYERS, Isolation

# Model-written code of an attacker: finds readable pages by writing them into a pipe (EFAULT on an
# unreadable one; /proc/self/maps is closed by Landlock), growing ranges from seed addresses (the
# break, and the addresses of live objects), and counts the needle everywhere but in its own copy.
SCANNER = r'''
import ctypes, gc, os

PAGE = 4096


def scan(hex_needle):
    needle = bytes.fromhex(hex_needle)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    libc.write.restype = ctypes.c_ssize_t
    libc.sbrk.restype = ctypes.c_void_p
    drain, sink = os.pipe()

    def readable(page):
        if libc.write(sink, page, PAGE) != PAGE:
            return False
        os.read(drain, PAGE)
        return True

    seeds = {libc.sbrk(0) - PAGE} | {id(o) for o in gc.get_objects()} | {id(needle), id("x" * 3000)}
    ranges, seen = [], set()
    for seed in sorted(seeds):
        page = seed & ~(PAGE - 1)
        if page in seen or not readable(page):
            continue
        lo, hi = page, page + PAGE
        while lo - PAGE not in seen and page - lo < (256 << 20) and readable(lo - PAGE):
            lo -= PAGE
        while hi not in seen and hi - page < (256 << 20) and readable(hi):
            hi += PAGE
        seen.update(range(lo, hi, PAGE))
        ranges.append((lo, hi))
    own = id(needle) + bytes.__basicsize__ - 1
    hits = 0
    for lo, hi in ranges:
        data = ctypes.string_at(lo, hi - lo)
        at = data.find(needle)
        while at >= 0:
            hits += lo + at != own
            at = data.find(needle, at + 1)
        del data
    return [hits, sum(hi - lo for lo, hi in ranges)]
'''


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(workers=1, timeout_s=20)) as box:  # one server: every job follows the last
        yield box


def _carry(sandbox, kind: str, marker: str) -> None:
    """A job that holds `marker` in its source (and its inputs, for a grading job) and in a large file."""
    if kind == "grade":
        source = f"def f(x):\n    return {marker!r}\n# {marker}\n"
        result = sandbox.call_function({"m.py": source}, "m", "f", [(marker + "-input",)])
        assert result.status == "ok"
    else:
        filler = ("padding " * 4000 + marker) * 3  # large enough to be malloc'd, not pooled
        result = sandbox.run_tests({"t.py": f"print({marker!r})\n", "data.txt": filler}, "python t.py")
        assert result.status == "ok"


def _scan(sandbox, kind: str, marker: str) -> list[int]:
    needle = marker.encode().hex()
    if kind == "grade":
        result = sandbox.call_function({"scanner.py": SCANNER}, "scanner", "scan", [(needle,)])
        assert result.status == "ok", result
        return list(result.outputs[0][1])
    run = sandbox.run_tests({"scan.py": SCANNER + f"\nprint(scan({needle!r}))\n"}, "python scan.py")
    assert run.status == "ok" and run.exit_code == 0, run.stdout
    return [int(word) for word in run.stdout.strip().strip("[]").split(",")]


@pytest.mark.parametrize("earlier", ["grade", "test_run"])
@pytest.mark.parametrize("later", ["grade", "test_run"])
def test_a_job_finds_nothing_of_an_earlier_job_in_its_memory(sandbox, earlier, later):
    marker = "MARKER" + secrets.token_hex(12)
    _carry(sandbox, earlier, marker)
    hits, scanned = _scan(sandbox, later, marker)
    assert scanned > 1 << 20  # the scan did look (megabytes of heap and arenas)
    assert hits == 0, f"{hits} copies of an earlier {earlier} job's marker in a {later} job's memory"


def test_scanner_finds_what_its_own_job_carries(sandbox):
    """The scan is not blind: a marker in the scanning job's own file is found."""
    marker = "MARKER" + secrets.token_hex(12)
    needle = marker.encode().hex()
    source = SCANNER + f"\nKEEP = {marker!r} * 2\nprint(scan({needle!r}))\n"
    run = sandbox.run_tests({"scan.py": source}, "python scan.py")
    assert run.status == "ok", run.stdout
    assert int(run.stdout.strip().strip("[]").split(",")[0]) >= 1


def _sleeper(uid: int) -> int:
    """A child of this process that becomes `uid` and sleeps (a dead server's job, still running)."""
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setresuid(uid, uid, uid)
            os.write(ready_write, b"x")
            time.sleep(10)
        finally:
            os._exit(0)
    os.close(ready_write)
    assert os.read(ready_read, 1) == b"x"  # it runs as `uid` now
    os.close(ready_read)
    return pid


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uids needs root")
def test_a_claimed_uid_starts_with_no_process_left_by_a_dead_server(monkeypatch):
    base = 1_600_000 + 2 * (os.getpid() % 100_000)  # a range of this test's own, away from live sandboxes
    monkeypatch.setattr(privileges, "UID_BASE", base)
    monkeypatch.setattr(privileges, "UID_SLOTS", 2)  # the claim's first slot is 0 or 1; the other is the bystander's
    claimed = base + privileges.first_slot()
    children = {"left": _sleeper(claimed), "bystander": _sleeper(2 * base + 1 - claimed)}
    statuses = {}
    iso = Isolation({name: False for name in LAYERS}, {}, scratch="", readable_dirs=[])
    try:
        privileges.claim_uid(iso)
        assert iso.uid == claimed
        statuses["left"] = os.waitpid(children["left"], 0)[1]  # the claim killed it: no wait beyond its death
        assert os.WIFSIGNALED(statuses["left"]) and os.WTERMSIG(statuses["left"]) == signal.SIGKILL
        pid, statuses["bystander"] = os.waitpid(children["bystander"], os.WNOHANG)
        assert pid == 0, "another uid's process was killed"
        del statuses["bystander"]
    finally:
        for fd in iso.keep_fds:
            os.close(fd)
        for name, pid in children.items():
            if name not in statuses:  # not reaped yet, so its pid is still this child's
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


COUNTERS = r'''
import ctypes, os


def probe():
    """Each system-wide counter this job can read: name -> True when it could be read."""
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(512)
    read = {"sysinfo": libc.sysinfo(buffer) == 0,
            "statfs": libc.statfs(b"/", buffer) == 0,
            "fstatfs": libc.fstatfs(0, buffer) == 0,
            "mincore": libc.mincore(ctypes.c_void_p(id(buffer) & ~4095), ctypes.c_size_t(4096), buffer) == 0}
    libc.posix_fadvise.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_long, ctypes.c_int]
    fd = os.open(os.__file__, os.O_RDONLY)
    read["fadvise"] = libc.posix_fadvise(fd, 0, 0, 4) == 0  # POSIX_FADV_DONTNEED: evicts shared pages
    read["readahead"] = libc.readahead(fd, ctypes.c_long(0), ctypes.c_size_t(4096)) == 0
    try:
        os.preadv(fd, [bytearray(16)], 0, getattr(os, "RWF_NOWAIT", 8))  # residency probe
        read["preadv2"] = True
    except OSError:
        read["preadv2"] = False
    os.close(fd)
    for path in ("/proc/meminfo", "/proc/loadavg", "/proc/stat", "/proc/vmstat", "/proc/pressure/cpu",
                 "/sys/fs/cgroup/memory.current", "/proc/self/maps"):
        try:
            with open(path) as handle:
                read[path] = bool(handle.read(1))
        except OSError:
            read[path] = False
    return read
'''


def test_no_system_wide_counter_is_readable(sandbox):
    result = sandbox.call_function({"counters.py": COUNTERS}, "counters", "probe", [()])
    assert result.status == "ok", result
    readable = [name for name, ok in result.outputs[0][1].items() if ok]
    assert readable == [], f"readable from inside a job: {readable}"
