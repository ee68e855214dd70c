"""docs/CLI.md lists every config key with its default and description: the block is what
scripts/config_reference.py generates from the schemas, so a new or changed field fails here until
the doc is regenerated."""

from __future__ import annotations

from repo_scripts import load_script


def test_the_config_reference_is_current():
    assert load_script("config_reference").main(["--check"]) == 0


def test_every_train_key_is_in_the_reference():
    import dataclasses

    from bugfix_rl.config import TrainConfig

    text = load_script("config_reference").reference()

    def leaves(schema, prefix=""):
        for field in dataclasses.fields(schema):
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else None
            if dataclasses.is_dataclass(default):
                yield from leaves(type(default), prefix + field.name + ".")
            else:
                yield prefix + field.name

    missing = [key for key in leaves(TrainConfig) if f"| `{key}` |" not in text]
    assert missing == []
