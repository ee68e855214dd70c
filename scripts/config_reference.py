"""Write docs/CLI.md's config reference: every key of every command's schema, its default and the
one-line description written beside the field in src/bugfix_rl/config/ (the same text as `--help`).

    python scripts/config_reference.py          # rewrite the block between the config-keys markers
    python scripts/config_reference.py --check  # exit 1 when the block is not what the schemas say
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels
from bugfix_rl.cli import COMMANDS, _schema_for
from bugfix_rl.present.help import described_keys

DOC = Path(__file__).resolve().parents[1] / "docs" / "CLI.md"
BEGIN, END = "<!-- config-keys:begin -->", "<!-- config-keys:end -->"


def schemas() -> list[tuple[str, type]]:
    """(the commands, their schema) for every command, grouped by the schema cli.py validates them against."""
    grouped: dict[type, list[str]] = {}
    for command in COMMANDS:
        grouped.setdefault(_schema_for(command), []).append(command)
    return [(", ".join(commands), schema) for schema, commands in grouped.items()]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reference() -> str:
    """The markdown block: one table per schema, `key | default | description`."""
    parts = []
    for commands, schema in schemas():
        values = dataclasses.asdict(schema())
        parts.append(f"### {commands}\n\n| key | default | description |\n|---|---|---|")
        for key, value, about in described_keys(schema, values):
            if value:  # a leaf; a sub-config's own row carries no value
                parts[-1] += f"\n| `{key}` | `{_cell(value)}` | {_cell(about)} |"
            else:
                parts[-1] += f"\n| **`{key}.*`** | | {_cell(about)} |"
    return "\n\n".join(parts)


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    wanted = f"{head}{BEGIN}\n{reference()}\n{END}{tail}"
    if "--check" in argv:
        if wanted != text:
            print("docs/CLI.md's config reference is stale: run python scripts/config_reference.py")
            return 1
        return 0
    DOC.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
