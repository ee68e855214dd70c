"""docs/ARCHITECTURE.md's worked examples cannot rot: each `python` block under an "Adding ..." heading
runs here in a fresh process (its registrations must not leak into other tests) and must print what
the page says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"


def sections() -> dict[str, str]:
    """'Adding an env' -> that section's text."""
    parts = re.split(r"^## ", DOC.read_text(), flags=re.M)
    return {part.split("\n", 1)[0]: part for part in parts if part.startswith("Adding")}


def run_example(section: str) -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    assert len(blocks) == 1, "one example per section"
    env = dict(os.environ, PYTHONHASHSEED="0")
    done = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def promised_output(section: str) -> list[str]:
    """What the page says the block prints: the plain block after it, or the `...` spans of 'It prints'."""
    after = section.split("```python", 1)[1].split("\n```\n", 1)[1]
    plain = re.match(r"\s*It prints:\s*\n\n```\n(.*?)```", after, flags=re.S)
    if plain:
        return plain.group(1).strip().splitlines()
    sentence = re.search(r"It prints (.*?)\.(\s|$)", after, flags=re.S)
    return re.findall(r"`([^`]*)`", sentence.group(1))


@pytest.mark.parametrize("title", ["Adding an advantage mode", "Adding an env", "Adding a policy"])
def test_the_example_prints_what_the_page_says(title):
    section = sections()[title]
    printed = run_example(section).strip().splitlines()
    assert printed == promised_output(section)


def test_every_adding_section_with_code_is_run_here():
    with_code = {title for title, text in sections().items() if "```python" in text}
    assert with_code == {"Adding an advantage mode", "Adding an env", "Adding a policy"}
