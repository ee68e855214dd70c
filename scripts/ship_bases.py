"""Build the RL bases the package ships (src/bugfix_rl/bases/) and drop the stale ones.

    make bases                      # = .venv/bin/python scripts/ship_bases.py
    .venv/bin/python scripts/ship_bases.py --check     # exit 1 when a shipped base is missing or stale
    .venv/bin/python scripts/ship_bases.py --verify    # rebuild each shipped base here; exit 1 if one differs

A base is shipped for the default config and for every experiment in conf/exp that trains TinyAgent
from policy.init=rl_base (most share the default's). Each is built here exactly as a run builds it (make_rl_base: its recipe, its
own thread count, portable kernels) into a temporary cache, then copied under the cache's file name,
`<prefix>-<recipe key>.safetensors`. The key hashes the recipe, the architecture, the vocabulary, the
code the weights depend on (rl_base.BASE_CODE), torch's version and the kernels, so a run loads a
shipped file only where its own build would give the same bytes. Editing that code (gym/*.py, the
scripted agents, the model, behaviour cloning; docstrings count) changes every key: run `make bases`
and commit src/bugfix_rl/bases/ with the change (tests/test_shipped_bases.py fails until then).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch

from bugfix_rl.cli import CONF_DIR, compose_train
from bugfix_rl.kernels import pinnable, requested_mode, settle_mkl_branch
from bugfix_rl.policy.build import build_tokenizer_for
from bugfix_rl.recipes.rl_base import SHIPPED_DIR, base_path, make_rl_base

def shipped_configs() -> list[tuple[str, object]]:
    """(label, TrainConfig) of the default config and of every experiment in conf/exp, composed as
    `bugfix-rl train` composes them, that starts TinyAgent from policy.init=rl_base."""
    labels = ["default"] + sorted(path.stem for path in (CONF_DIR / "exp").glob("*.yaml"))
    configs = []
    for label in labels:
        cfg = compose_train([] if label == "default" else [f"exp={label}"])
        if cfg.policy.name == "tiny" and cfg.policy.init == "rl_base":
            configs.append((label, cfg))
    return configs


def wanted_files() -> dict[str, tuple[str, object]]:
    """{file name: (label, config)} of the bases that should be shipped with this code."""
    wanted = {}
    for label, cfg in shipped_configs():
        wanted.setdefault(base_path(build_tokenizer_for(cfg), cfg.policy, cfg.env).name, (label, cfg))
    return wanted


def verify(wanted: dict[str, tuple[str, object]], present: set[str]) -> int:
    """Rebuild each shipped base by its recipe (not cached) and compare it with the shipped file,
    tensor by tensor: 0 when every one is identical, else 1 (a differing one prints its largest gap)."""
    from safetensors.torch import load_file

    from bugfix_rl.checkpoint import model_tensors

    differing = 0
    for name in sorted(set(wanted) & present):
        label, cfg = wanted[name]
        started = time.perf_counter()
        rebuilt = model_tensors(make_rl_base(build_tokenizer_for(cfg), cfg.policy, cache=False, env_cfg=cfg.env))
        shipped = load_file(SHIPPED_DIR / name)
        gaps = {key: (rebuilt[key] - shipped[key]).abs().max().item() for key in shipped
                if key in rebuilt and not torch.equal(rebuilt[key], shipped[key])}
        if set(rebuilt) != set(shipped) or gaps:
            differing += 1
            worst = max(gaps.items(), key=lambda item: item[1]) if gaps else ("(names differ)", float("nan"))
            print(f"DIFFERS {name} ({label}): {len(gaps)} tensors, largest gap {worst[1]:.3g} in {worst[0]}")
        else:
            print(f"identical {name} ({label}), rebuilt in {time.perf_counter() - started:.0f} s")
    return 1 if differing else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say which shipped bases are missing or stale")
    parser.add_argument("--verify", action="store_true",
                        help="rebuild every shipped base (not cached) and compare its tensors with the shipped file")
    args = parser.parse_args()
    settle_mkl_branch()  # a base built on 2 threads gets the same bytes in every process (kernels.py)
    if requested_mode() != "portable" or not pinnable():
        sys.exit("ship_bases: shipped bases are built on the portable kernels (BUGFIX_RL_KERNELS=portable, "
                 "an x86-64 CPU with AVX2 and FMA)")
    wanted = wanted_files()
    present = {path.name for path in SHIPPED_DIR.glob("*.safetensors")}
    missing, stale = sorted(set(wanted) - present), sorted(present - set(wanted))
    if args.check:
        for name in missing:
            print(f"missing: {name} ({wanted[name][0]})")
        for name in stale:
            print(f"stale: {name}")
        sys.exit(1 if missing or stale else 0)
    if args.verify:
        sys.exit(verify(wanted, present))
    SHIPPED_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ship-bases-") as cache:
        for name in missing:
            label, cfg = wanted[name]
            cfg.policy.cache_dir = cache
            started = time.perf_counter()
            make_rl_base(build_tokenizer_for(cfg), cfg.policy, env_cfg=cfg.env)
            built = Path(cache) / name
            shutil.copyfile(built, SHIPPED_DIR / name)
            print(f"built {name} ({label}) in {time.perf_counter() - started:.0f} s")
    for name in stale:
        (SHIPPED_DIR / name).unlink()
        print(f"removed stale {name}")
    print(f"{len(wanted)} bases shipped in {SHIPPED_DIR}")


if __name__ == "__main__":
    main()
