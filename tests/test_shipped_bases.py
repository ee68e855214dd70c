"""The RL bases shipped in the package (src/bugfix_rl/bases/, written by `make bases`): one for each
config that starts TinyAgent from rl_base, none stale, and a run loads its own instead of building it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bugfix_rl.checkpoint import load_checkpoint
from bugfix_rl.config import TrainConfig
from bugfix_rl.kernels import pinnable, requested_mode
from bugfix_rl.policy.build import build_tokenizer_for
from bugfix_rl.recipes.rl_base import SHIPPED_DIR, base_path, make_rl_base, shipped_base
from repo_scripts import load_script

REPO = Path(__file__).resolve().parents[1]
portable = pytest.mark.skipif(requested_mode() != "portable" or not pinnable(),
                              reason="the shipped bases are the portable kernels' (their key names the kernels)")


def _ship_bases():
    return load_script("ship_bases")


@portable
def test_every_config_that_starts_from_rl_base_has_its_base_shipped_and_none_is_stale():
    wanted = _ship_bases().wanted_files()
    present = {path.name for path in SHIPPED_DIR.glob("*.safetensors")}
    assert set(wanted) - present == set(), "run `make bases` and commit src/bugfix_rl/bases/"
    assert present - set(wanted) == set(), "stale bases: run `make bases` (it removes them) and commit"
    labels = {label for label, _ in wanted.values()}
    assert {"default", "tools", "tools_generated", "capstone_generated"} <= labels


@portable
def test_a_run_with_an_empty_cache_loads_the_shipped_base_and_writes_nothing(tmp_path):
    cfg = TrainConfig()
    cfg.policy.cache_dir = str(tmp_path)
    tokenizer = build_tokenizer_for(cfg)
    path = base_path(tokenizer, cfg.policy, cfg.env)
    model = make_rl_base(tokenizer, cfg.policy, env_cfg=cfg.env)
    shipped, meta = load_checkpoint(shipped_base(path))
    assert meta["kind"] == "rl_base" and list(tmp_path.iterdir()) == []
    state = model.state_dict()
    assert all(torch.equal(state[name.removeprefix("model.")], tensor) for name, tensor in shipped.items())


TOOLS_BUILDER = """
import sys
import bugfix_rl
import torch
from bugfix_rl.config import TrainConfig
from bugfix_rl.policy.build import build_tokenizer_for
from bugfix_rl.recipes.rl_base import make_rl_base
cfg = TrainConfig()
cfg.env.name, cfg.policy.cache_dir = "tools", sys.argv[1]
cfg.policy.copy_head, cfg.policy.max_len = True, 256
cfg.policy.tools_base.episodes, cfg.policy.tools_base.steps, cfg.policy.tools_base.threads = 16, 5, 1
model = make_rl_base(build_tokenizer_for(cfg), cfg.policy, env_cfg=cfg.env)
print(sum(float(t.double().sum()) for t in model.state_dict().values()))
"""


def test_two_concurrent_runs_that_need_the_same_tools_base_build_it_once(tmp_path):
    """Two processes started together that need one uncached tools base (a tiny recipe here): one builds it
    under the lock (rl_base._one_builder), the other waits for it (or, had the first finished by then, loads
    it): one build, one file, the same weights in both."""
    import subprocess
    import sys

    runs = [subprocess.Popen([sys.executable, "-c", TOOLS_BUILDER, str(tmp_path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    builds = sum("building the tools RL base" in err for _, err in outputs)
    assert builds == 1, [err for _, err in outputs]
    assert len(list(tmp_path.glob("rl_base_tools-*.safetensors"))) == 1
    assert outputs[0][0] == outputs[1][0]


def test_the_committed_tiny_qwen3_is_this_codes():
    """tests/fixtures holds one tiny Qwen3 (scripts/tiny_qwen_fixture.py), named by the key the Qwen tests
    look for; with another transformers than the one that wrote it the tests build their own (skip)."""
    import json

    import transformers

    from bugfix_rl.recipes.tiny_qwen import tiny_qwen_name

    (committed,) = (REPO / "tests" / "fixtures").glob("tiny_qwen3_*")
    written_by = json.loads((committed / "config.json").read_text()).get("transformers_version")
    if written_by != transformers.__version__:
        pytest.skip(f"the fixture was written by transformers {written_by}, this is {transformers.__version__}")
    assert committed.name == tiny_qwen_name(), "run scripts/tiny_qwen_fixture.py and commit tests/fixtures"
