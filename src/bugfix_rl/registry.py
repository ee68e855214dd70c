"""The registry every pipeline stage uses: a dict keyed by the config string whose missing-key error
names the kind and lists the valid keys."""

from __future__ import annotations


class Registry(dict):
    """A dict whose missing-key error lists the valid keys."""

    def __init__(self, kind: str, entries: dict) -> None:
        super().__init__(entries)
        self.kind = kind

    def __missing__(self, name: str):
        raise KeyError(f"unknown {self.kind} {name!r}; valid: {', '.join(sorted(self))}")
