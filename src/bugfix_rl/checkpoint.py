"""Checkpoints: safetensors weights + JSON metadata, written atomically, loaded without pickle."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bugfix_rl.errors import CheckpointError  # noqa: F401  (raised here; importers take it from either module)


def save_checkpoint(path: str | Path, tensors: dict[str, torch.Tensor], meta: dict) -> Path:
    """Write `tensors` and `meta` (JSON-able) to `path` atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
        save_file(tensors, tmp, metadata={"bugfix_rl": json.dumps(meta)})
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def load_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, meta) of a checkpoint written by save_checkpoint; CheckpointError otherwise."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        tensors = load_file(str(path))
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get("bugfix_rl")
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"cannot read checkpoint {path}: {str(err).splitlines()[0]}") from None
    if raw is None:
        raise CheckpointError(f"{path} is a safetensors file but not a bugfix-rl checkpoint (no metadata)")
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError:
        raise CheckpointError(f"checkpoint {path} has corrupt metadata") from None
    return tensors, meta


def model_tensors(model: torch.nn.Module, prefix: str = "model.") -> dict[str, torch.Tensor]:
    """The state dict under `prefix`; a tensor sharing storage with an earlier one (tied embeddings, as
    in Qwen3) is cloned, since safetensors refuses shared tensors."""
    tensors, seen = {}, set()
    for key, value in model.state_dict().items():
        shared = value.untyped_storage().data_ptr() in seen
        seen.add(value.untyped_storage().data_ptr())
        tensors[prefix + key] = value.clone() if shared else value
    return tensors


def load_model_state(model: torch.nn.Module, tensors: dict[str, torch.Tensor], path, prefix: str = "model.") -> None:
    state = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    try:
        model.load_state_dict(state)
    except RuntimeError as err:  # torch's message: a header line, then one line per kind of mismatch
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        detail = lines[1] if len(lines) > 1 and lines[0].endswith(":") else lines[0]
        raise CheckpointError(f"checkpoint {path} does not fit this model: {detail[:240]}") from None


def optimizer_tensors(state: dict, prefix: str = "optim.") -> tuple[dict, list]:
    """Flatten an optimizer's state_dict (per-parameter state by index) into tensors; its param_groups
    go to the metadata."""
    tensors = {}
    for index, per_param in state["state"].items():
        for key, value in per_param.items():
            tensors[f"{prefix}{index}.{key}"] = value if torch.is_tensor(value) else torch.tensor(value)
    return tensors, state["param_groups"]


def optimizer_state(tensors: dict, param_groups: list, prefix: str = "optim.") -> dict:
    """The optimizer state_dict that optimizer_tensors flattened."""
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        if name.startswith(prefix):
            index, key = name[len(prefix):].split(".", 1)
            state.setdefault(int(index), {})[key] = value
    return {"state": state, "param_groups": param_groups}
