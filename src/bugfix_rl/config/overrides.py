"""Setting a config value by its dotted key, as a Hydra override does, for code that builds configs."""

from __future__ import annotations


def set_dotted(cfg, key: str, value) -> None:
    """Set `a.b.c` on a config object (what a Hydra override does, for code that builds configs)."""
    node = cfg
    *parents, leaf = key.split(".")
    for part in parents:
        node = getattr(node, part)
    setattr(node, leaf, value)
