"""Hydra overrides (`key=value`) read from a command line and checked against a config schema before
Hydra composes them, so a mistyped key or a bad value is one line (UserError) naming what is allowed;
and `set_dotted`, what an override does, for code that builds configs."""

from __future__ import annotations

import dataclasses

from bugfix_rl.errors import UserError

FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                    "--config-dir", "-cd", "--experimental-rerun", "--info", "-i"}  # Hydra's: the value is the next arg


def plain_overrides(args: list[str]) -> list[str]:
    """The `key=value` arguments, without Hydra's flags and their values."""
    plain, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg.startswith("-"):
            skip = arg in FLAGS_WITH_VALUE and "=" not in arg
            continue
        plain.append(arg)
    return plain


def field_names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def did_you_mean(word: str, choices) -> str:
    """ "did you mean 'x'? " for the closest of `choices` to a mistyped `word`, else "" """
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'? " if close else ""


def check_key(schema, key: str, groups=()) -> None:
    """UserError unless the dotted `key` names a field of `schema` (a config dataclass); a mistyped
    top-level key is also matched against the config `groups` for its hint."""
    node = schema
    parts = key.split(".")
    for depth, part in enumerate(parts):
        names = field_names(node)
        if part not in names:
            where = ".".join(parts[:depth]) or "the top level"
            hint = did_you_mean(part, names + (list(groups) if depth == 0 else []))
            raise UserError(f"unknown config key '{key}'; {hint}valid keys in {where}: {', '.join(names)}")
        field = next(f for f in dataclasses.fields(node) if f.name == part)
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else None
        if depth < len(parts) - 1:
            if not dataclasses.is_dataclass(default):
                raise UserError(f"'{'.'.join(parts[:depth + 1])}' has no sub-keys (in '{key}')")
            node = type(default)


def check_value(schema, key: str, value: str) -> None:
    """UserError unless `value` (as written on the command line) is allowed for `key`: one of its
    CHOICES, and of the field's type."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from bugfix_rl.config.validate import CHOICES

    if key in CHOICES and value not in CHOICES[key]:
        raise UserError(f"{key}={value} is not allowed; valid values: {', '.join(CHOICES[key])}")
    leaf = key.rsplit(".", 1)[-1]
    try:
        OmegaConf.merge(OmegaConf.structured(_leaf_schema(schema, key)), OmegaConf.from_dotlist([f"{leaf}={value}"]))
    except OmegaConfBaseException as err:
        reason = str(err).splitlines()[0]
        raise UserError(f"bad value for '{key}': {reason}") from None


def _leaf_schema(schema, key: str):
    """A dataclass with the one field that the dotted `key` names in `schema` (check_key has checked the
    path), typed as there: checking a value against it costs about 1 ms, where structuring the whole
    train schema costs 40-70 ms."""
    import typing

    *parents, leaf = key.split(".")
    owner = schema
    for part in parents:  # a sub-key's parent is a dataclass-valued field, as check_key requires
        field = next(f for f in dataclasses.fields(owner) if f.name == part)
        owner = type(field.default_factory())
    return dataclasses.make_dataclass("Leaf", [(leaf, typing.get_type_hints(owner)[leaf])])


def set_dotted(cfg, key: str, value) -> None:
    """Set `a.b.c` on a config object (what a Hydra override does, for code that builds configs)."""
    node = cfg
    *parents, leaf = key.split(".")
    for part in parents:
        node = getattr(node, part)
    setattr(node, leaf, value)
