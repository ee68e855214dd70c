"""The rollout schedule as part of a run's state: the batches in flight at a checkpoint, as JSON.

With rollout.max_staleness = k > 0, the batch of step s is sampled at step s - k with the weights of
that step (run/trainer.Trainer), so a checkpoint written after step s - 1 has up to k batches that were
sampled with older weights and not yet trained on. A resume that drew them again would sample them
with the resumed weights and from a generator that has moved on: a different run. Instead the
checkpoint records those batches, each episode with the weights version that sampled it
(Trajectory.policy_version), and the resumed trainer trains on them at their steps, in step order:
what was consumed when does not depend on when a worker's results arrived. Together with the
sampling generator's state (which already drew those batches), the resumed run is the uninterrupted one.

Each episode's `info` (EpisodeInfo, ToolsEpisodeInfo) is stored as its dataclass's fields with the
class name; Counter, frozenset and tuple fields come back as those types (JSON has lists and objects).
Floats go through Python's repr, which round-trips every double (and so every float32 log-prob) exactly.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from bugfix_rl.gym.edit_menu import EpisodeInfo
from bugfix_rl.gym.tools.env import ToolsEpisodeInfo
from bugfix_rl.types import Trajectory

INFO_TYPES = {cls.__name__: cls for cls in (EpisodeInfo, ToolsEpisodeInfo)}


def _plain(value):
    """A field value as JSON can hold it (Counter -> dict, frozenset/tuple -> sorted/ordered list)."""
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def info_record(info) -> dict:
    """{"type": class name, "fields": {name: value}} for a registered info dataclass."""
    name = type(info).__name__
    if name not in INFO_TYPES:
        raise TypeError(f"cannot record episode info of type {name}; known: {', '.join(INFO_TYPES)}")
    return {"type": name, "fields": {f.name: _plain(getattr(info, f.name)) for f in dataclasses.fields(info)}}


def info_from_record(record: dict):
    """The inverse of info_record: each field back in the type of its default (Counter, frozenset, ...)."""
    cls = INFO_TYPES[record["type"]]
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in record["fields"]:
            continue  # written before the field existed: its default
        value = record["fields"][f.name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if isinstance(default, (Counter, frozenset, tuple)):
            value = type(default)(value)
        values[f.name] = value
    return cls(**values)


def trajectory_record(t: Trajectory) -> dict:
    return {"ids": list(t.ids), "policy_mask": [bool(m) for m in t.policy_mask],
            "sampler_logp": [float(x) for x in t.sampler_logp], "reward": float(t.reward), "group": int(t.group),
            "info": info_record(t.info), "policy_version": int(t.policy_version), "oov_words": list(t.oov_words),
            "guided": [[int(position), [int(i) for i in ids]] for position, ids in t.guided]}


def trajectory_from_record(record: dict) -> Trajectory:
    return Trajectory(record["ids"], record["policy_mask"], record["sampler_logp"], record["reward"], record["group"],
                      info_from_record(record["info"]), record["policy_version"], tuple(record["oov_words"]),
                      tuple((position, tuple(ids)) for position, ids in record.get("guided", ())))  # (absent: unguided)


def schedule_record(ready: dict[int, list[Trajectory]]) -> dict[str, list[dict]]:
    """step -> its batch (trajectories), as JSON: the batches sampled but not yet trained on."""
    return {str(step): [trajectory_record(t) for t in batch] for step, batch in sorted(ready.items())}


def schedule_from_record(record: dict[str, list[dict]]) -> dict[int, list[Trajectory]]:
    return {int(step): [trajectory_from_record(r) for r in batch] for step, batch in record.items()}


def replay_caveats(on_cuda: bool, rows: list[dict]) -> list[str]:
    """Why this run may not replay bit for bit (a rerun or a resume with the same seed, threads and
    CPU kernels), one line each; [] where nothing known stands in the way. The CPU paths (in-process,
    in-process shards, Ray actors, any max_staleness) are checked to replay (tests/test_replay.py,
    docs/REPRODUCIBILITY.md). Not checked, and so named here: CUDA kernels (not made deterministic or
    batch-invariant here), and a tools-env sandbox run cut by env.step_budget_s, a wall clock that a
    rerun on a busier or quieter machine need not repeat (`over_budget` in the step's rows)."""
    caveats = []
    if on_cuda:
        caveats.append("replay not guaranteed: the policy ran on CUDA, whose kernels this project does not make "
                       "deterministic or batch-invariant")
    cut = [row["step"] for row in rows if (row.get("over_budget") or 0) > 0]
    if cut:
        caveats.append(f"replay not guaranteed: at steps {cut} a sandbox run was cut by env.step_budget_s (wall "
                       f"clock), which a rerun need not repeat")
    return caveats
