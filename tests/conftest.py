"""Shared fixtures: the word tokenizer, the cached RL base, and small train configs."""

from __future__ import annotations

import copy
import os

# Two pytest-xdist workers share the two cores; a run inside one (and every process a test starts: they
# inherit this) uses 2 threads. OpenMP's default busy-waits for work, so two such processes spin against
# each other (a tiny-Qwen3 preflight took 14-16 s in the suite, 1-5 s alone). Passive waiting only
# changes how idle threads wait, not what is computed. Set before torch loads (libgomp reads it then).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch

from bugfix_rl.config import TrainConfig, set_dotted
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.kernels import settle_mkl_branch
from bugfix_rl.policy.tokenizer import build_tokenizer

settle_mkl_branch()  # tests that build or train in this process run the branch MKL_CBWR names on every thread
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # local Ray clusters on 127.0.0.1 (read at import)


PREBUILD = """
import bugfix_rl
from bugfix_rl.kernels import settle_mkl_branch
settle_mkl_branch()
from bugfix_rl.config import TrainConfig
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.tokenizer import build_tokenizer
from bugfix_rl.recipes.rl_base import make_rl_base
make_rl_base(build_tokenizer(make_tasks("all")), TrainConfig().policy)
"""


def pytest_configure(config):
    """With xdist workers and no cached edit-menu RL base, build it in a background process from the
    start: the workers run the tests that do not need it meanwhile, and the first that needs it waits
    on the build's lock (rl_base._one_builder) and loads it, instead of one worker building it while the
    other waits idle."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return  # an xdist worker, or a run without workers: the fixture builds it when needed
    from bugfix_rl.recipes.rl_base import base_path, shipped_base

    path = base_path(build_tokenizer(make_tasks("all")), TrainConfig().policy)
    if path.is_file() or shipped_base(path).is_file():
        return
    import subprocess
    import sys

    config._rl_base_prebuild = subprocess.Popen([sys.executable, "-c", PREBUILD], stdout=subprocess.DEVNULL)
    os.environ["BUGFIX_RL_TESTS_HEAVY_FIRST"] = "0"  # the workers (started after this) keep the usual order


# The files whose tests take longest in all (summed durations of `make test` on a 2-core EPYC,
# 2026-12-05: 40 s down to 10 s each), run first: xdist's loadfile hands a worker one file at a time, so
# a long file that starts last keeps one core busy after the other has finished (Makefile's `make test`
# keeps this order with --no-loadscope-reorder). The other files follow in their usual order.
HEAVY_FIRST = ("test_first_hour.py", "test_experiments.py", "test_rollout_workers.py", "test_preflight.py",
               "test_golden.py", "test_qwen.py", "test_generator.py", "test_eval_report.py",
               "test_architecture_doc.py", "test_data_parallel.py", "test_sandbox_adversarial.py",
               "test_train.py", "test_presets.py", "test_kernels.py", "test_copy_head.py")


def pytest_collection_modifyitems(session, config, items):
    """Heavy files first (HEAVY_FIRST), each file's tests kept in their order; not while the RL base is
    being built in the background (pytest_configure): the heavy files that need it would wait first."""
    if os.environ.get("BUGFIX_RL_TESTS_HEAVY_FIRST") == "0":
        return
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files and tests keep their order


def pytest_unconfigure(config):
    """A run that never needed the base does not wait for it: the build stops with the session (its lock
    goes with the process, and a checkpoint is written atomically, so no half-written base lands)."""
    prebuild = getattr(config, "_rl_base_prebuild", None)
    if prebuild is not None and prebuild.poll() is None:
        prebuild.terminate()
        prebuild.wait()


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(make_tasks("all"))


@pytest.fixture(scope="session")
def tools_tokenizer():
    """The tools env's word tokenizer over the book's tasks (their words and the tools vocabulary)."""
    from bugfix_rl.gym.tools.vocabulary import tools_vocabulary

    tasks = make_tasks("all")
    return build_tokenizer(tasks, extra_words=tools_vocabulary(tasks))


@pytest.fixture(scope="session")
def rl_base(tokenizer):
    """The real RL base (built once per machine, then loaded from ~/.cache/bugfix_rl)."""
    from bugfix_rl.recipes.rl_base import make_rl_base

    torch.set_num_threads(1)  # one thread: a busy 2-core machine makes 2 spinning threads crawl
    return make_rl_base(tokenizer, TrainConfig().policy)


@pytest.fixture
def base_copy(rl_base):
    return copy.deepcopy(rl_base)


def small_config(**overrides) -> TrainConfig:
    """A quick train config: a few steps, small groups, no console, no test eval unless asked."""
    cfg = TrainConfig()
    cfg.steps = 3
    cfg.threads = 1
    cfg.logger.console = False
    cfg.eval.n_val = 2
    cfg.eval.n_test = 2
    cfg.eval.test = False
    cfg.preflight = False
    for key, value in overrides.items():
        set_dotted(cfg, key, value)
    return cfg
