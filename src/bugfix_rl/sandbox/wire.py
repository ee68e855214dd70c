"""Plain-value codec and message framing shared by the trusted parent, the fork server and the runner.

Stdlib only: the fork server imports this with `python -I -S -B` and no site-packages.

Values cross the sandbox boundary as tagged JSON trees, never as pickles or reprs, so the parent
rebuilds them from literals alone. `encode` accepts exact plain types only (`type(v) is int`, not
`isinstance`), so an `int` subclass with an always-true `__eq__` is refused inside the sandbox, and
`decode` re-checks every tag in the parent, where the model's code cannot reach.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time

MAX_DEPTH = 32
MAX_NODES = 100_000
MAX_FRAME_BYTES = 64 << 20  # a parent <-> server message (request files, replies)

_HEADER = struct.Struct(">I")


class NotPlain(TypeError):
    """A value that is not built from None/bool/int/float/str/bytes/list/tuple/dict alone."""


def encode(value) -> list:
    """Plain value -> tagged tree, e.g. (1, [2.5]) -> ["t", [["i", 1], ["l", [["f", "0x1.4p+1"]]]]]."""
    budget = [MAX_NODES]

    def walk(v, depth):
        budget[0] -= 1
        if budget[0] < 0 or depth > MAX_DEPTH:
            raise NotPlain("value too large or too deeply nested")
        kind = type(v)
        if v is None:
            return ["n"]
        if kind is bool:
            return ["b", v]
        if kind is int:
            if v.bit_length() > 13_000:  # ~4,000 digits: int <-> str conversion limit
                raise NotPlain("integer too large")
            return ["i", int.__repr__(v)]
        if kind is float:
            return ["f", float.hex(v)]
        if kind is str:
            return ["s", str.__str__(v)]
        if kind is bytes:
            return ["y", bytes.hex(v)]
        if kind is list or kind is tuple:
            items = list.__iter__(v) if kind is list else tuple.__iter__(v)
            return ["l" if kind is list else "t", [walk(item, depth + 1) for item in items]]
        if kind is dict:
            return ["d", [[walk(k, depth + 1), walk(x, depth + 1)] for k, x in dict.items(v)]]
        raise NotPlain(f"not a plain value: {kind.__name__}")

    return walk(value, 0)


def decode(tree):
    """Tagged tree -> plain value; raises ValueError, and nothing else, on anything malformed.

    The tree is model-reachable (a job can write its own report), so every other way a literal can
    fail is turned into ValueError too: a hex float past the float range (OverflowError), an
    unhashable dict key (TypeError), a caller already near the recursion limit (RecursionError).
    """
    try:
        return _decode(tree)
    except (OverflowError, TypeError, RecursionError) as error:
        raise ValueError(f"malformed tree: {type(error).__name__}: {error}"[:200]) from error


def _describe(node) -> str:
    """A malformed node in a few words. Never its repr: a forged node can be megabytes long, or nested
    past the recursion limit, and repr builds all of it before any cut."""
    if type(node) is list and node and type(node[0]) is str:
        return f"node tagged {node[0][:20]!r} with {len(node) - 1} items"
    return f"node of type {type(node).__name__}"


def _decode(tree):
    budget = [MAX_NODES]

    def walk(node, depth):
        budget[0] -= 1
        if budget[0] < 0 or depth > MAX_DEPTH:
            raise ValueError("value too large or too deeply nested")
        if type(node) is not list or not node or type(node[0]) is not str:
            raise ValueError(f"malformed {_describe(node)}")
        tag, body = node[0], node[1:]
        if tag == "n" and not body:
            return None
        if len(body) != 1:
            raise ValueError(f"malformed {_describe(node)}")
        (item,) = body
        if tag == "b" and type(item) is bool:
            return item
        if tag == "i" and type(item) is str and len(item) <= 4000:
            return int(item)
        if tag == "f" and type(item) is str:
            return float.fromhex(item)
        if tag == "s" and type(item) is str:
            return item
        if tag == "y" and type(item) is str:
            return bytes.fromhex(item)
        if tag in ("l", "t") and type(item) is list:
            values = [walk(child, depth + 1) for child in item]
            return values if tag == "l" else tuple(values)
        if tag == "d" and type(item) is list:
            pairs = [(walk(pair[0], depth + 1), walk(pair[1], depth + 1))
                     for pair in item if type(pair) is list and len(pair) == 2]
            if len(pairs) != len(item):
                raise ValueError("malformed dict node")
            return dict(pairs)  # an unhashable key (a list) raises TypeError: decode makes it ValueError
        raise ValueError(f"malformed {_describe(node)}")

    return walk(tree, 0)


def plain_equal(got, want) -> bool:
    """Equal values of the same exact type at every level (so True != 1 and 2.0 != 2), as the gym's
    own check. Both sides are plain values rebuilt in the parent: `==` runs no model code here."""
    if type(got) is not type(want):
        return False
    if type(got) in (list, tuple):
        return len(got) == len(want) and all(plain_equal(g, w) for g, w in zip(got, want))
    if type(got) is dict:
        return got.keys() == want.keys() and all(plain_equal(got[k], want[k]) for k in got)
    return got == want


# ---- framing: 4-byte big-endian length + body, over raw file descriptors ----
#
# Start-up messages (the server's limits, its hello) are JSON frames. Jobs and replies, one each per
# job, are binary: the parent's job frame is JOB_HEADER + the job dict as marshal (version 2: no
# shared references, so a job's values arrive as separate objects, as the JSON trees did). The
# server reads only the header and passes the marshal bytes to the job child unread; the child
# rebuilds the dict. Both ends of that channel are trusted (the parent wrote it); nothing a job
# writes is ever read with marshal: its report and output travel back as bytes in REPLY_HEADER's
# frame and are decoded by the parent alone (`results.read_report`, `decode`).

JOB_HEADER = struct.Struct(">dB")  # wall-clock limit (s); 1 for a grading call (its output is not kept)
MARSHAL_VERSION = 2
# exit code, signal, flags, duration (s), then the byte lengths of setup_error, result, stdout
REPLY_HEADER = struct.Struct(">iiIdIII")
_TIMED_OUT, _OVERFLOW, _LEFTOVER, _EXITED, _SIGNALED, _SETUP_ERROR, _RESULT = (1 << bit for bit in range(7))


def write_raw_frame(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def write_frame(fd: int, message) -> None:
    write_raw_frame(fd, json.dumps(message, separators=(",", ":")).encode())


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes | None:
    chunks, remaining = [], size
    while remaining:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError("no reply from the sandbox server")
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_raw_frame(fd: int, deadline: float | None = None) -> bytes | None:
    """Next frame's body from `fd`, or None at end of file. Raises TimeoutError past `deadline`."""
    header = _read_exact(fd, _HEADER.size, deadline)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    return _read_exact(fd, size, deadline)


def read_sole_frame(fd: int) -> bytes | None:
    """The body of the only frame ever written to `fd` (a job child's job pipe), or None if the pipe
    ends first. Reads as much as the pipe holds at once: two reads (header, then body) make the child
    contend with the writer for the pipe's lock."""
    data = os.read(fd, 1 << 16)
    if len(data) < _HEADER.size:
        while data and len(data) < _HEADER.size:
            more = os.read(fd, _HEADER.size - len(data))
            if not more:
                return None
            data += more
        if len(data) < _HEADER.size:
            return None
    (size,) = _HEADER.unpack_from(data)
    if size > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    end = _HEADER.size + size
    if len(data) < end:
        rest = _read_exact(fd, end - len(data), None)
        if rest is None:
            return None
        data += rest
    return data[_HEADER.size:end]


def read_frame(fd: int, deadline: float | None = None):
    """Next JSON message from `fd`, or None at end of file. Raises TimeoutError past `deadline`."""
    data = read_raw_frame(fd, deadline)
    return None if data is None else json.loads(data)


def encode_reply(exit_code: int | None, signal: int | None, timed_out: bool, setup_error: bytes | None,
                 result: bytes | None, result_overflow: bool, stdout: bytes, duration_s: float,
                 leftover: bool) -> bytes:
    """The server's reply to one job (raw bytes; the parent decodes them)."""
    flags = ((timed_out and _TIMED_OUT) | (result_overflow and _OVERFLOW) | (leftover and _LEFTOVER)
             | (exit_code is not None and _EXITED) | (signal is not None and _SIGNALED)
             | (setup_error is not None and _SETUP_ERROR) | (result is not None and _RESULT))
    setup_error, result = setup_error or b"", result or b""
    return b"".join((REPLY_HEADER.pack(exit_code or 0, signal or 0, flags, duration_s, len(setup_error),
                                       len(result), len(stdout)), setup_error, result, stdout))


def decode_reply(data: bytes) -> dict:
    """The reply dict the parent works with (text decoded with errors='replace'); ValueError if the
    frame does not add up (a server out of step)."""
    try:
        exit_code, signal, flags, duration_s, *sizes = REPLY_HEADER.unpack_from(data)
    except struct.error as error:
        raise ValueError(f"malformed reply: {error}") from error
    if REPLY_HEADER.size + sum(sizes) != len(data):
        raise ValueError("malformed reply: lengths do not add up")
    start, parts = REPLY_HEADER.size, []
    for size in sizes:
        parts.append(data[start:start + size].decode("utf-8", "replace"))
        start += size
    setup_error, result, stdout = parts
    return {"exit_code": exit_code if flags & _EXITED else None,
            "signal": signal if flags & _SIGNALED else None,
            "timed_out": bool(flags & _TIMED_OUT),
            "setup_error": setup_error if flags & _SETUP_ERROR else None,
            "result": result if flags & _RESULT else None,
            "result_overflow": bool(flags & _OVERFLOW),
            "stdout": stdout, "duration_s": duration_s, "leftover": bool(flags & _LEFTOVER)}
