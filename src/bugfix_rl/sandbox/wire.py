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


# ---- framing: 4-byte big-endian length + UTF-8 JSON, over raw file descriptors ----

def write_frame(fd: int, message) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


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
    return b"".join(chunks)


def read_frame(fd: int, deadline: float | None = None):
    """Next message from `fd`, or None at end of file. Raises TimeoutError past `deadline`."""
    header = _read_exact(fd, _HEADER.size, deadline)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    data = _read_exact(fd, size, deadline)
    if data is None:
        return None
    return json.loads(data)
