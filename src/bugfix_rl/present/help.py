"""`bugfix-rl <command> --help`: every config key with its value and its one-line description.

The descriptions are the comments written beside each field in the config package (read from its source
with the syntax tree, so each is written once, where the field is defined); the values are the
config the rest of the command line composes (`train +exp=tools --help` shows the tools recipe's).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import io
import pkgutil
import tokenize
from functools import cache


@cache
def field_comments() -> dict[tuple[str, str], str]:
    """(dataclass name, field name) -> the comment on the field's line in the config package's modules."""
    from bugfix_rl import config

    out = {}
    for module in pkgutil.iter_modules(config.__path__, config.__name__ + "."):
        source = inspect.getsource(importlib.import_module(module.name))
        comments = {token.start[0]: token.string.lstrip("#").strip()
                    for token in tokenize.generate_tokens(io.StringIO(source).readline) if token.type == tokenize.COMMENT}
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef):
                for statement in node.body:
                    if isinstance(statement, ast.AnnAssign) and statement.end_lineno in comments:
                        out[(node.name, statement.target.id)] = comments[statement.end_lineno]
    return out


def described_keys(schema, values: dict, prefix: str = "") -> list[tuple[str, str, str]]:
    """[(dotted key, value as text, description)] for every leaf of `schema` (a config dataclass),
    its value taken from `values` (the composed config as a dict); a sub-config's own line first."""
    rows = []
    comments = field_comments()
    for field in dataclasses.fields(schema):
        key, value = prefix + field.name, values.get(field.name)
        about = comments.get((schema.__name__, field.name), "")
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default):
            rows.append((key, "", about))
            rows += described_keys(type(default), value or {}, key + ".")
        else:
            rows.append((key, "???" if value == "???" else repr(value) if isinstance(value, str) else str(value), about))
    return rows


def config_help(schema, values: dict) -> str:
    """The key listing: `key = value` then the description, aligned; sub-configs as headings."""
    rows = described_keys(schema, values)
    width = max(len(f"{key} = {value}") for key, value, _ in rows if value) + 2
    lines = []
    for key, value, about in rows:
        if not value and about and "." not in key:  # a sub-config: a heading
            lines.append(f"\n{key}.*: {about}")
        elif not value:
            lines.append(f"{key}.*: {about}")
        else:
            lines.append(f"{f'{key} = {value}':<{width}}{about}")
    return "\n".join(lines).lstrip("\n")
