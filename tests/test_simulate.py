"""The rollout-pipeline simulator: design-review question 18's arithmetic, Little's law, the
throughput bound, the staleness bound, sync vs async on a long tail, the warm pool, determinism,
and the `bugfix-rl simulate` command."""

from __future__ import annotations

import dataclasses

import pytest

from bugfix_rl import cli
from bugfix_rl.config import SimulateConfig
from bugfix_rl.commands.simulate import littles_law_concurrency, mean_episode_seconds, simulate, turn_seconds

# Question 18: 50 turns, ~400 policy tokens per turn decoded at 40 tokens/s, an 8 s tool per turn,
# a 3-minute container start, 512 episodes per optimizer step, one step every 30 minutes.
Q18 = dict(turns=50, tokens_per_turn=400, decode_tokens_per_second=40, tool_seconds=8, startup_seconds=180,
           episodes_per_step=512, target_step_minutes=30)


def q18(**overrides) -> SimulateConfig:
    return SimulateConfig(**{**Q18, "tail_sigma": 0.0, "update_seconds": 60, **overrides})


def test_question_18_arithmetic():
    w = q18()
    assert turn_seconds(w) == 18.0  # 400 / 40 = 10 s decoding + 8 s tool
    assert mean_episode_seconds(w, cold_start=False) == 15 * 60  # 50 turns x 18 s
    assert mean_episode_seconds(w) == 18 * 60  # + 3 min start-up
    # L = lambda * W = (512 episodes / 30 min) x 18 min
    assert littles_law_concurrency(512, 30 * 60, 18 * 60) == pytest.approx(307.2)
    assert littles_law_concurrency(512, 30 * 60, mean_episode_seconds(w)) == pytest.approx(307.2)


def test_simulated_cluster_of_307_slots_makes_one_step_every_30_minutes():
    """Async (staleness 1) keeps every slot busy, so ceil(307.2) slots give ~2 steps/hour and fewer don't."""
    enough = simulate(q18(workers=308), max_staleness=1)
    assert enough.steps_per_hour == pytest.approx(2.0, rel=0.03)  # pipeline fill costs the first ~18 min
    assert enough.littles_l == pytest.approx(307.2, rel=0.01)
    assert enough.mean_duration_min == pytest.approx(18.0, rel=0.02)
    short = simulate(q18(workers=256), max_staleness=1)
    assert short.steps_per_hour < 0.85 * 2.0  # 256 / 307.2 = 0.83
    # a warm pool takes the 3-minute start off the critical path: W = 15 min, L = 512/30 x 15 = 256
    warm = simulate(q18(workers=256, warm_pool=370), max_staleness=1)  # pool ~1.2 x 307 (question 18)
    assert warm.warm_hit_rate == 1.0 and warm.steps_per_hour == pytest.approx(2.0, rel=0.03)


def test_async_keeps_generators_busier_than_sync_on_a_long_tail():
    w = SimulateConfig(**Q18, tail_sigma=0.67, workers=320, update_seconds=300, steps=12)
    sync = simulate(w, max_staleness=0)
    for bound in (1, 2):
        asynchronous = simulate(w, max_staleness=bound)
        assert asynchronous.worker_utilisation > sync.worker_utilisation + 0.3
        assert asynchronous.useful_utilisation > sync.useful_utilisation
        assert asynchronous.steps_per_hour > 2 * sync.steps_per_hour
        assert asynchronous.trained_vs_started_duration < 1.0  # dropped stale episodes are the long ones
    assert sync.dropped == 0 and sync.mean_staleness == 0 and sync.trained_vs_started_duration == 1.0


@pytest.mark.parametrize("bound", [0, 1, 3])
@pytest.mark.parametrize("workers,sigma,pool", [(64, 0.0, 0), (200, 0.67, 0), (600, 1.0, 128), (1000, 0.3, 2000)])
def test_throughput_never_exceeds_workers_over_mean_duration(workers, sigma, pool, bound):
    w = SimulateConfig(**Q18, workers=workers, tail_sigma=sigma, warm_pool=pool, steps=6, update_seconds=120)
    result = simulate(w, max_staleness=bound)
    # finished episodes occupy disjoint slot time: completed x mean duration <= workers x wall time
    completed_per_hour = result.completed / result.hours
    assert result.episodes_per_hour <= completed_per_hour * (1 + 1e-9)
    assert completed_per_hour <= result.max_rate_per_hour * (1 + 1e-9)
    assert result.max_rate_per_hour == pytest.approx(workers / result.mean_duration_min * 60)
    assert result.max_staleness_seen <= bound
    assert result.trained == 6 * w.episodes_per_step
    assert 0 < result.worker_utilisation <= 1 + 1e-9 and 0 < result.trainer_utilisation <= 1
    if bound == 0:  # Little's law is exact when nothing is in flight at the end
        assert result.littles_lambda_w == pytest.approx(result.littles_l, rel=1e-9)


def test_littles_law_holds_in_the_long_run():
    """Async ends with every slot busy; the episodes cut off at the end fade as the horizon grows."""
    result = simulate(SimulateConfig(**Q18, tail_sigma=0.67, workers=320, steps=40), max_staleness=1)
    assert result.littles_l == pytest.approx(320.0)
    assert result.littles_lambda_w == pytest.approx(result.littles_l, rel=0.02)


def test_warm_pool_needs_a_burst_in_sync_but_only_lambda_times_startup_in_async():
    w = SimulateConfig(**Q18, workers=512, warm_pool=256, steps=8)
    sync, asynchronous = simulate(w, max_staleness=0), simulate(w, max_staleness=1)
    assert sync.warm_hit_rate == 0.5  # each step starts its 512 episodes at once; 256 are warm
    # async starts ~34/min after the first burst (512 slots / 15 min): 34 x 3 min = 102 < 256 suffice;
    # the misses are the first burst's 256 of 8 x 512 + 512 started
    assert asynchronous.warm_hit_rate > 0.9
    assert simulate(dataclasses.replace(w, warm_pool=512), max_staleness=0).warm_hit_rate == 1.0


def test_deterministic_for_a_seed():
    w = SimulateConfig(steps=5)
    assert simulate(w) == simulate(w)
    assert simulate(w) != simulate(dataclasses.replace(w, seed=1))


def test_simulate_command_prints_sync_and_async(capsys):
    cli.main(["simulate", "steps=3"])  # the defaults are question 18's cluster
    out = capsys.readouterr().out
    assert "sync" in out and "async (max_staleness=1)" in out and "steps / hour" in out
    assert "307.2 concurrent episodes" in out and "256.0 with a warm pool" in out


@pytest.mark.parametrize("args,message", [(["max_staleness=0"], "max_staleness=0 must be >= 1"),
                                          (["workers=0"], "workers=0 must be > 0"),
                                          (["worker=3"], "unknown config key 'worker'")])
def test_simulate_bad_input_is_one_line_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["simulate", *args])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


# ---------------------------------------------------------------- calibration from a run


def test_calibration_turns_a_runs_steps_into_episode_durations_and_an_update_time():
    """A step that sampled E episodes on W workers in S seconds: episodes of S * W / E seconds; the
    first row (warm-up) is left out; the update time is the median."""
    from bugfix_rl.commands.simulate import calibrated

    rows = [{"time_sample": 9.0, "time_update": 9.0, "sampled_episodes": 64},
            {"time_sample": 3.2, "time_update": 1.0, "sampled_episodes": 64},
            {"time_sample": 1.6, "time_update": 3.0, "sampled_episodes": 32},
            {"time_sample": 6.4, "time_update": 2.0, "sampled_episodes": 64}]
    w = calibrated(SimulateConfig(workers=2), rows, run_workers=2, run_episodes=64)
    assert w.episode_seconds == pytest.approx([0.1, 0.1, 0.2])
    assert w.update_seconds == 2.0 and w.episodes_per_step == 64 and w.startup_seconds == 0 and w.warm_pool == 0
    assert w.workers == 2  # the configuration to predict is the caller's
    with pytest.raises(ValueError, match="no timed steps"):
        calibrated(SimulateConfig(), [{"reward": 0.0}, {"reward": 1.0}], 0, 64)


def test_a_calibrated_sync_step_is_its_sampling_plus_its_update_and_async_hides_the_shorter():
    """Constant 0.1-s episodes, 64 per step: 1 worker samples a step in 6.4 s, 2 workers in 3.2 s; sync
    adds the 2-s update, async with staleness 1 overlaps them (the longer of the two, once the pipeline
    is full)."""
    base = SimulateConfig(episode_seconds=[0.1], update_seconds=2.0, episodes_per_step=64, startup_seconds=0,
                          tool_seconds=0, warm_pool=0, steps=200)
    for workers, sampling in ((1, 6.4), (2, 3.2)):
        w = dataclasses.replace(base, workers=workers)
        sync, asynchronous = simulate(w, 0), simulate(w, 1)
        assert sync.hours * 3600 / sync.steps == pytest.approx(sampling + 2.0, rel=1e-9)
        assert asynchronous.hours * 3600 / asynchronous.steps == pytest.approx(max(sampling, 2.0), rel=0.02)


def test_simulate_calibrate_needs_a_finished_synchronous_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["simulate", f"calibrate={tmp_path}"])
    assert exit_info.value.code == 2 and "not a finished run dir" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "eval.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["simulate", f"calibrate={tmp_path}"])
    assert exit_info.value.code == 2 and "not an eval.json with the run's resolved config" in capsys.readouterr().err
