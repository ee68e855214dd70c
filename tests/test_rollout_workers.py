"""Rollout pools: Ray actors give the in-process sharded path's episodes; bounded staleness is exact.

The Ray tests start a local Ray cluster in this process (two actors, one thread each).
"""

from __future__ import annotations

import copy

import pytest
import torch

from bugfix_rl.algo.update import token_logprobs
from bugfix_rl.config import ConfigError, validate
from bugfix_rl.gym.envs import make_env_factory
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.build import build_tokenizer_for
from bugfix_rl.rollout.collect import sample_groups
from bugfix_rl.rollout.jobs import draw_names, shard_jobs
from bugfix_rl.rollout.pool import InlinePool, ShardedLocalPool
from bugfix_rl.run.trainer import Trainer
from bugfix_rl.types import collate
from tests.conftest import small_config

from conftest_qwen import tiny_qwen_dir  # noqa: F401  (a fixture)


def _trainer(model, tokenizer, cfg):
    torch.set_num_threads(cfg.threads)  # 1 in small_config, as in the actors
    make_env, close_env = make_env_factory(cfg.env)
    torch.manual_seed(cfg.seed)
    return Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(cfg.seed)), close_env


def _run(model, tokenizer, cfg, steps: int):
    trainer, close_env = _trainer(model, tokenizer, cfg)
    try:
        rows = [trainer.step(s) for s in range(steps)]
    finally:
        trainer.close()
        close_env()
    return rows


def _without_times(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in rows]


def _episodes(trajectories):
    return [(t.ids, t.policy_mask, t.sampler_logp, t.reward, t.group, t.policy_version) for t in trajectories]


def test_shards_cover_every_group_once_with_their_own_seeds():
    tasks = make_tasks("train")[:5]
    jobs = shard_jobs(tasks, 4, 10, 1.0, 2, torch.Generator().manual_seed(0))
    assert [len(j.tasks) for j in jobs] == [12, 8]  # whole groups: 3 + 2 tasks of 4 episodes
    assert [g for j in jobs for g in j.groups] == [10 + i // 4 for i in range(20)]
    assert [t.name for j in jobs for t in j.tasks] == [t.name for t in tasks for _ in range(4)]
    assert jobs[1].seed == jobs[0].seed + 1
    # the names are the inline path's first draw from the same generator
    assert [n for j in jobs for n in j.names] == draw_names(20, torch.Generator().manual_seed(0))


def test_inline_pool_is_the_sampler_path(rl_base, tokenizer):
    make_env, _ = make_env_factory(small_config().env)
    tasks = make_tasks("train")[:3]
    a = sample_groups(rl_base, tokenizer, tasks, 4, make_env, 1.0, torch.Generator().manual_seed(5))
    b = InlinePool(rl_base, tokenizer, make_env).submit(tasks, 4, 1.0, torch.Generator().manual_seed(5))
    assert _episodes(a) == _episodes(b)


def test_staleness_one_samples_next_batch_with_the_previous_weights(base_copy, tokenizer):
    """max_staleness=1: the batch trained at step 1 was sampled before step 0's update, by version 0."""
    cfg = small_config(**{"rollout.max_staleness": 1, "algo.tis_cap": 2.0})
    version0 = copy.deepcopy(base_copy)
    trainer, close_env = _trainer(base_copy, tokenizer, cfg)
    row0 = trainer.step(0)
    ahead = trainer.pool.result(trainer.in_flight[1])  # submitted during step 0, before its update
    assert {t.policy_version for t in ahead} == {0}
    batch = collate(ahead, tokenizer.pad_id)
    with torch.no_grad():
        old = token_logprobs(version0, batch.ids, cfg.algo.temperature, mask=batch.mask).logp
        new = token_logprobs(trainer.model, batch.ids, cfg.algo.temperature, mask=batch.mask).logp
    on = batch.mask > 0
    assert float((old - batch.old_logp).abs()[on].max()) < 1e-4  # sampled by version 0
    assert float((new - batch.old_logp).abs()[on].max()) > 1e-3  # and the learner has moved on
    row1 = trainer.step(1)
    trainer.close()
    close_env()
    assert row0["staleness_mean"] == 0.0 and row1["staleness_mean"] == 1.0 and row1["staleness_max"] == 1.0
    assert 0.0 <= row1["tis_truncated_frac"] <= 1.0


def test_staleness_needs_the_importance_correction():
    cfg = small_config(**{"rollout.max_staleness": 1})
    with pytest.raises(ConfigError, match="algo.tis_cap"):
        validate(cfg)


def test_shard_count_changes_the_stream_not_reproducibility(base_copy, rl_base, tokenizer):
    """A seed per shard: 1 and 2 shards sample different episodes; the same shard count repeats exactly."""
    cfg1 = small_config(**{"rollout.workers": 1, "rollout.engine": "local"})
    cfg2 = small_config(**{"rollout.workers": 2, "rollout.engine": "local"})
    r1 = _run(copy.deepcopy(rl_base), tokenizer, cfg1, 2)
    r2 = _run(copy.deepcopy(rl_base), tokenizer, cfg2, 2)
    r2_again = _run(base_copy, tokenizer, cfg2, 2)
    assert _without_times(r2) == _without_times(r2_again)
    assert _without_times(r1) != _without_times(r2)


# ------------------------------------------------------------------------------------------------
# Ray actors (a local cluster started in this process).

ray = pytest.importorskip("ray")


def test_a_process_starts_ray_once_for_all_its_pools(rl_base, monkeypatch, capsys):
    """Preflight's pool and the trainer's pool share one cluster: Ray used to start (and stop) once per
    pool, three times in one run (46 s against 19 s in process for 4 steps). Each start says what it
    starts, on stderr (it was silent for a minute in issue 38). First of this file's Ray tests: the
    cluster it starts serves the ones after it (a cluster already running is shut down first)."""
    from bugfix_rl.rollout import ray_pool

    if ray.is_initialized():
        ray.shutdown()
    starts = []
    real_init = ray.init
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: starts.append(kwargs) or real_init(*args, **kwargs))
    lines = []
    for _ in range(2):
        pool = ray_pool.RayPool(small_config(**{"rollout.workers": 1}), rl_base, 1)
        pool.close()
        assert ray.is_initialized() and pool.actors == []
        lines.append(capsys.readouterr().err.splitlines())
    assert len(starts) == 1
    assert lines[0][0].startswith("starting a local Ray cluster (") and "and 1 rollout worker (1 thread each" in lines[0][0]
    assert lines[1][0].startswith("starting 1 rollout worker (1 thread each") and "on the running Ray cluster" in lines[1][0]
    assert all(said[-1].startswith("rollout workers ready in ") for said in lines), lines  # (Ray may warn between)


@pytest.mark.parametrize("staleness", [0, pytest.param(1, marks=pytest.mark.slow)])  # 1: ~30 s more
def test_ray_workers_train_exactly_like_the_in_process_shards(rl_base, tokenizer, staleness):
    overrides = {"rollout.workers": 2, "rollout.max_staleness": staleness}
    if staleness:
        overrides["algo.tis_cap"] = 2.0
    local_model, ray_model = copy.deepcopy(rl_base), copy.deepcopy(rl_base)
    local = _run(local_model, tokenizer, small_config(**overrides, **{"rollout.engine": "local"}), 3)
    remote = _run(ray_model, tokenizer, small_config(**overrides, **{"rollout.engine": "ray"}), 3)
    assert _without_times(local) == _without_times(remote)
    assert all(torch.equal(p, q) for p, q in zip(local_model.parameters(), ray_model.parameters()))
    assert [r["staleness_max"] for r in remote] == [0.0] + [float(staleness)] * 2


def test_ray_workers_sample_and_grade_tools_episodes_in_their_own_sandboxes(tokenizer):
    """env=tools: the actors' sandboxes grade the same episodes to the same rewards as in-process."""
    from bugfix_rl.policy.build import build_policy
    from bugfix_rl.rollout.ray_pool import RayPool

    cfg = small_config(**{"env.name": "tools", "policy.init": "scratch", "policy.max_len": 384, "rollout.workers": 2})
    torch.set_num_threads(1)  # the actors' thread count: the same floats need the same reductions
    tools_tokenizer = build_tokenizer_for(cfg)
    torch.manual_seed(0)
    model = build_policy(cfg.policy, tools_tokenizer)
    make_env, close_env = make_env_factory(cfg.env)
    tasks = make_tasks("train")[:4]
    try:
        local = ShardedLocalPool(model, tools_tokenizer, make_env, 2)
        local.set_weights(model, 3)
        expected = local.result(local.submit(tasks, 2, 1.0, torch.Generator().manual_seed(1)))
        pool = RayPool(cfg, model, 2)
        try:
            assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")  # loopback only
            pool.set_weights(model, 3)
            got = pool.result(pool.submit(tasks, 2, 1.0, torch.Generator().manual_seed(1)))
        finally:
            pool.close()
    finally:
        close_env()
    assert _episodes(got) == _episodes(expected)
    assert [t.info.grade_flags for t in got] == [t.info.grade_flags for t in expected]
    assert {t.policy_version for t in got} == {3}


@pytest.mark.slow  # ~25 s: starts a Ray cluster and waits for a killed actor's death to surface
def test_ray_pool_closes_cleanly_when_an_actor_died(rl_base, capsys):
    from bugfix_rl.rollout.ray_pool import RayPool

    pool = RayPool(small_config(**{"rollout.workers": 2}), rl_base, 2)
    ray.kill(pool.actors[0])
    pool.close(timeout=10.0)  # warns, kills the rest; does not raise
    assert "did not close cleanly" in capsys.readouterr().err
    assert pool.actors == []


def test_a_ray_pool_says_what_it_starts_before_it_starts_ray(rl_base, monkeypatch, capsys):
    from bugfix_rl.rollout import ray_pool

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_pool, "_ray_running", lambda: False)

    def no_ray(cpus_needed):  # what was on stderr when Ray would have started
        raise RuntimeError(capsys.readouterr().err)

    monkeypatch.setattr(ray_pool, "_start_ray", no_ray)
    with pytest.raises(RuntimeError) as before:
        ray_pool.RayPool(small_config(**{"rollout.workers": 2}), rl_base, 2, threads=1)
    assert str(before.value).startswith("starting a local Ray cluster (") and "and 2 rollout workers" in str(before.value)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert ray_pool.startup_line(2, 1).startswith("joining the Ray cluster at 10.0.0.1:6379 and starting 2 rollout")


@pytest.mark.slow  # ~27 s; the Ray pool's path is the TinyAgent tests' (default suite), the chat replica's init is the rest
def test_ray_workers_sample_the_tiny_qwen3s_chat_episodes_like_the_in_process_shards(tiny_qwen_dir):
    """policy=qwen3 rollout.workers=2: two Ray actors, each with a replica of the chat model that the
    learner's weights are published to, sample token-in/token-out chat episodes (ids, policy mask and
    the sampler's log-probs) equal to the in-process shards' for the same seeds; 2 training steps give
    the same rows and the same weights."""
    from conftest_qwen import qwen_config
    from bugfix_rl.policy.build import build_policy

    rows, weights = {}, {}
    for engine in ("local", "ray"):
        cfg = qwen_config(tiny_qwen_dir, **{"rollout.workers": 2, "rollout.engine": engine, "threads": 1,
                                            "algo.entropy_coef": 0.01})
        tokenizer = build_tokenizer_for(cfg)
        model = build_policy(cfg.policy, tokenizer)
        rows[engine] = _without_times(_run(model, tokenizer, cfg, 2))
        weights[engine] = [p.detach().clone() for p in model.parameters()]
    assert rows["local"] == rows["ray"]
    assert rows["ray"][0]["policy_tokens"] > 0 and rows["ray"][0]["logp_gap"] < 1e-4  # token-in/token-out
    assert all(torch.equal(p, q) for p, q in zip(weights["local"], weights["ray"]))
    assert any(not torch.equal(p, q) for p, q in zip(weights["ray"], build_policy(cfg.policy, tokenizer).parameters()))
