"""Measure the covert channels that stay open between two concurrent sandbox jobs.

    python scripts/covert_channel.py                  # CPU contention, 400 slots of 20 ms
    python scripts/covert_channel.py --slot-ms 50 --slots 200

Two jobs run at the same time on two workers, as a grading job and another rollout's test run can:
a sender that, per time slot, either spins (bit 1) or sleeps (bit 0) following a random bit string,
and a receiver that counts its own loop iterations per slot. Both align their slots on the shared
wall clock. The receiver's counts are split at their median; the bit error rate p gives the
capacity of a binary symmetric channel, 1 - H(p) bits per slot. The page cache of the shared stdlib
files is the other open channel (a read's latency tells whether another job read the file first);
--page-cache measures it the same way: the sender reads the slot's stdlib file for a 1, the
receiver times its own first read of that file.

The counters a job could both change and read directly (sysinfo, statfs, /proc, page-cache probes)
are closed by seccomp and Landlock: tests/test_sandbox_isolation.py checks them.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import secrets
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bugfix_rl.sandbox import Sandbox, SandboxConfig  # noqa: E402

JOB = r'''
import os, sys, time


def wait_until(t):
    while time.time() < t:
        pass


def cpu(role, bits, start, slot):
    out = []
    for i, bit in enumerate(bits):
        begin, end = start + i * slot, start + (i + 1) * slot
        wait_until(begin) if role == "receiver" or bit else None
        if role == "sender":
            if bit:
                x = 0
                while time.time() < end:
                    x += 1
            else:
                time.sleep(max(0.0, end - time.time()))
        else:
            count = 0
            while time.time() < end:
                count += 1
            out.append(count)
    return out


def page_cache(role, bits, start, slot, files):
    out = []
    for i, bit in enumerate(bits):
        time.sleep(max(0.0, start + i * slot + (0 if role == "sender" else slot / 2) - time.time()))
        path = files[i]
        began = time.perf_counter()
        if role == "sender" and not bit:
            continue
        try:
            with open(path, "rb") as handle:
                while handle.read(1 << 16):
                    pass
        except OSError:
            pass
        out.append(time.perf_counter() - began)
    return out
'''


def entropy(p: float) -> float:
    return 0.0 if p <= 0 or p >= 1 else -p * math.log2(p) - (1 - p) * math.log2(1 - p)


def stdlib_files(count: int, seed: int) -> list[str]:
    """Rarely imported stdlib files the receiver may read (Landlock allows the stdlib)."""
    root = Path(os.__file__).parent
    files = sorted(str(p) for p in root.rglob("*.py") if "test" not in p.parts and p.stat().st_size > 20_000)
    random.Random(seed).shuffle(files)
    return files[:count]


def measure(kind: str, slots: int, slot_s: float) -> tuple[float, float]:
    """(bit error rate, capacity in bits per second) of one run."""
    bits = [secrets.randbelow(2) for _ in range(slots)]
    start = time.time() + 1.5
    files = stdlib_files(slots, secrets.randbits(32)) if kind == "page_cache" else []
    timeout = start - time.time() + slots * slot_s + 10
    with Sandbox(SandboxConfig(workers=2, timeout_s=timeout, cpu_s=int(timeout) + 5)) as box, \
            ThreadPoolExecutor(2) as pool:
        extra = (files,) if files else ()
        sender = pool.submit(box.call_function, {"job.py": JOB}, "job", "cpu" if not files else "page_cache",
                             [("sender", bits, start, slot_s, *extra)])
        receiver = pool.submit(box.call_function, {"job.py": JOB}, "job", "cpu" if not files else "page_cache",
                               [("receiver", bits, start, slot_s, *extra)])
        sent, got = sender.result(), receiver.result()
    if sent.status != "ok" or got.status != "ok" or got.outputs[0][0] != "value":
        raise SystemExit(f"a job failed: sender {sent}, receiver {got}")
    values = got.outputs[0][1]
    threshold = sorted(values)[len(values) // 2]
    # CPU: fewer iterations while the sender spins; page cache: a faster read after the sender's
    decoded = [int(v < threshold) for v in values]
    errors = sum(d != b for d, b in zip(decoded, bits)) / len(bits)
    errors = min(errors, 1 - errors)
    return errors, (1 - entropy(errors)) / slot_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=400)
    parser.add_argument("--slot-ms", type=float, default=20.0)
    parser.add_argument("--page-cache", action="store_true", help="the stdlib page-cache channel instead of CPU")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    kind = "page_cache" if args.page_cache else "cpu"
    print(f"{kind} channel, {args.slots} slots of {args.slot_ms:g} ms, {os.cpu_count()} cores, "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for _ in range(args.repeats):
        errors, capacity = measure(kind, args.slots, args.slot_ms / 1e3)
        print(f"bit error rate {errors:.3f}  capacity {capacity:.1f} bits/s")


if __name__ == "__main__":
    main()
