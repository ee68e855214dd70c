"""A kill -9 storm leaves nothing behind (issue 40): a small `scripts/bench_sandbox.py --lifecycle`.

Load threads keep both workers busy (grading calls, test runs, 0.3 s jobs) while SIGKILLs go, in
turn, to a server, a running job, a zygote and a running job, every 0.1 s for 1.5 s. No call may raise
(a lost server is that job's `sandbox_error`), the sandbox must grade again afterwards, no process of
its uids may be left while it is open, and once it is closed nothing may be left: no live process of
any server's tree seen during the storm, no sandbox dir in the host's temp dir, no new mount in this
mount namespace, no new fd in this process. Nothing here is timed.
"""

import os
import select
import signal
import time
from types import SimpleNamespace

from bugfix_rl.sandbox.zygote import reap_with_group
from repo_scripts import load_script
from sandboxes import live_processes_of, start_sandbox


def bench_sandbox():
    return load_script("bench_sandbox", "bench_sandbox_script")


def test_a_kill_storm_on_servers_zygotes_and_jobs_leaks_nothing():
    bench = bench_sandbox()
    sandbox = start_sandbox(workers=2, timeout_s=5)
    storm = bench.Storm(sandbox, seconds=1.5, kill_every_s=0.1, seed=0)
    try:
        storm.run()
        graded = sandbox.call_function({"share.py": bench.SOURCE}, "share", "share", bench.INPUTS)
        ran = sandbox.run_tests({"share.py": bench.SOURCE, "test_share.py": bench.TESTS}, "pytest")
        deadline = time.monotonic() + 2.0  # a job SIGKILLed last may take a moment to go
        while live_processes_of(sandbox.uids) and time.monotonic() < deadline:
            time.sleep(0.05)
        left_while_open = live_processes_of(sandbox.uids)  # uids the sandbox still holds: no one else's
    finally:
        sandbox.close()
    found = bench.leaks(storm, uids=(), wait_for_zombies=False)  # zombies are PID 1's to reap
    assert storm.raised == []
    assert storm.kills["server"] >= 1 and storm.kills["job"] >= 1, storm.kills
    assert "ok" in storm.statuses and "sandbox_error" in storm.statuses, storm.statuses
    assert graded.status == "ok" and graded.outputs == [("value", want) for want in bench.EXPECTED]
    assert ran.status == "ok" and ran.exit_code == 0, ran.stdout
    assert left_while_open == []
    assert {name: found[name] for name in ("processes", "files", "mounts", "fds")} == \
        {"processes": [], "files": [], "mounts": [], "fds": []}


def test_the_storm_kills_only_its_own_servers_zygotes_and_jobs(monkeypatch):
    """A process of one of the storm's uids that is not a child of its zygotes (another sandbox's job,
    once that sandbox claimed a uid a dead server of the storm's had held) is never a target; nor is a
    closed worker's pid, nor its old zygote's child."""
    bench = bench_sandbox()
    live = SimpleNamespace(process=SimpleNamespace(pid=100, returncode=None), closed=False)
    closed = SimpleNamespace(process=SimpleNamespace(pid=200, returncode=-9), closed=True)
    storm = bench.Storm(SimpleNamespace(_workers=[live, closed], uids=[7, 8]), seconds=0, kill_every_s=0)
    table = {100: (1, 50, "S", 0), 101: (100, 51, "S", 0), 102: (101, 52, "S", 7),  # server, zygote, job
             200: (1, 60, "S", 0), 201: (200, 61, "S", 0), 202: (201, 62, "S", 8),  # pids of the closed one
             300: (299, 70, "S", 7), 301: (101, 71, "S", 9)}  # uid 7 elsewhere; a zygote's child of uid 9
    killed = []
    monkeypatch.setattr(bench, "_start_time", lambda pid: table[pid][1])
    monkeypatch.setattr(bench, "os", SimpleNamespace(kill=lambda pid, _: killed.append(pid)))
    for turn in range(200):
        storm.turn = turn
        storm._kill_one(table)
    assert set(killed) == {100, 101, 102}
    monkeypatch.setattr(bench, "_start_time", lambda pid: table[pid][1] + 1)  # each pid now names a later process
    killed.clear()
    for turn in range(4):
        storm.turn = turn
        storm._kill_one(table)
    assert killed == []


def test_the_zygote_kills_what_a_job_left_in_its_group_before_it_reaps_the_job():
    """Without seccomp a job can fork. reap_with_group kills the job's process group while the job is a
    zombie (its pid, the group's id, not yet free for reuse), then reaps it: the job's grandchild, still
    sleeping in that group, is gone, and the status is the job's own."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the job: its own session, one grandchild left behind in it, then exit 3
        try:
            os.close(read_end)
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                time.sleep(60)
                os._exit(0)
            os.write(write_end, str(grandchild).encode())
        finally:
            os._exit(3)
    os.close(write_end)
    grandchild = int(os.read(read_end, 32))
    os.close(read_end)
    watch = os.pidfd_open(grandchild)  # readable once the grandchild has exited
    status = None
    try:
        assert not select.select([watch], [], [], 0)[0], "the grandchild ended before the reaping"
        status = reap_with_group(child)
        assert select.select([watch], [], [], 5)[0], "the job's grandchild outlived the job"
    finally:
        try:
            signal.pidfd_send_signal(watch, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(watch)
        if status is None:
            os.waitpid(child, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3
