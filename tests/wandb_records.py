"""The records of an offline W&B run file (run-*.wandb: a LevelDB-style log of protobuf Records), for
tests that read back what a run sent to W&B without a server."""

from __future__ import annotations

import struct
import time
from pathlib import Path


def wandb_records(path: str | Path, timeout_s: float = 60) -> list:
    """Every wandb_internal_pb2.Record of the file, in order, once it ends with its `exit` record: right
    after run.finish() W&B's service process may still be writing the last records (the test that read
    at once saw the last history row missing in 1 of 3 runs)."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = _read_records(path)
        if (records and records[-1].WhichOneof("record_type") == "exit") or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _read_records(path: str | Path) -> list:
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    records, pos, pending, block = [], 7, b"", 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a record header is padding
            pos += block - pos % block
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            records.append(record)
    return records


def items(update) -> dict:
    """{key: JSON text} of a history or summary record's items (nested keys joined by /)."""
    return {item.key or "/".join(item.nested_key): item.value_json for item in update}
