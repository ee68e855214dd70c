"""Write the committed tiny Qwen3 test fixture (tests/fixtures/tiny_qwen3_<key>/) and drop stale ones.

    .venv/bin/python scripts/tiny_qwen_fixture.py

The fixture is what tests/conftest_qwen.py would otherwise build once per machine (cached_tiny_qwen:
random weights, the stand-in tokenizer, a warm start on scripted episodes). Its name is its key, which
covers recipes/tiny_qwen.py, the prompts and template, torch's and transformers' versions: after a change
to any of them the tests build their own copy (a minute) until this script is run and its output committed.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch
import transformers

from bugfix_rl.recipes.tiny_qwen import cached_tiny_qwen, tiny_qwen_name

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def main() -> None:
    name = tiny_qwen_name()
    FIXTURES.mkdir(exist_ok=True)
    for stale in FIXTURES.glob("tiny_qwen3_*"):
        if stale.name != name:
            shutil.rmtree(stale)
            print(f"removed stale {stale.name}")
    if (FIXTURES / name / "config.json").is_file():
        print(f"{name} is current")
        return
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="tiny-qwen-fixture-") as cache:
        shutil.copytree(cached_tiny_qwen(cache), FIXTURES / name)
    print(f"wrote tests/fixtures/{name} (torch {torch.__version__}, transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
