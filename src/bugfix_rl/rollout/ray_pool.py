"""Rollout and grading workers on Ray (`rollout.workers=N`, `rollout.engine=ray`).

Each actor holds a policy replica (TinyAgent, or a chat model sampling token-in/token-out chat
episodes with their log-probs; on a machine with GPUs each actor gets 1/N of them), the tokenizer and its own env factory (for env=tools its own
sandbox, so grading runs in the actor too). A step's groups are split into shards by
`pool.shard_jobs`; shard i goes to actor i mod N. An actor runs its calls in the order they were
sent, so weights published with `set_weights` before a `submit` are the weights that sample it: the
trajectories are stamped with that version and are the same as `ShardedLocalPool`'s.

Ray starts in-process (a local cluster of this machine's cores, on 127.0.0.1) unless one is already
running; with RAY_ADDRESS set, the pool joins that cluster instead. It starts once per process: a run's
pools (preflight's, the trainer's) share it, a pool's close kills only its actors, and the cluster this
process started stops when the process exits.
"""

from __future__ import annotations

import atexit
import os
import sys

import torch

from bugfix_rl.kernels import set_torch_threads
from bugfix_rl.rollout.jobs import EpisodeJob, sample_job, shard_jobs, stamp
from bugfix_rl.types import Trajectory


def _local_cluster_settings() -> None:
    """Ray reads these when it is first imported: no usage reporting, and a local cluster (no
    RAY_ADDRESS to join) bound to the loopback address, as Ray does on macOS, instead of the machine's
    network interface."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if "RAY_ADDRESS" not in os.environ:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


_local_cluster_settings()


def _ray():
    _local_cluster_settings()
    import ray

    return ray


class RolloutWorker:
    """One actor: a policy replica and an env factory built from the run's config."""

    def __init__(self, cfg, threads: int):
        set_torch_threads(threads)
        from bugfix_rl.gym.envs import make_env_factory
        from bugfix_rl.policy.build import REPLICA_INIT, build_policy, build_tokenizer_for

        self.tokenizer = build_tokenizer_for(cfg)
        self.model = build_policy(cfg.policy, self.tokenizer, init=REPLICA_INIT[cfg.policy.name]).eval()
        self.make_env, self.close_env = make_env_factory(cfg.env)
        self.version = 0

    def set_weights(self, state: dict, version: int) -> None:
        self.model.load_state_dict(state)
        self.version = version

    def sample(self, job: EpisodeJob) -> list[Trajectory]:
        return stamp(sample_job(self.model, self.tokenizer, self.make_env, job), self.version)

    def close(self) -> None:
        self.close_env()


_STARTED_CPUS = 0  # CPUs of the local cluster this process started (0: none started here)


def _start_ray(cpus_needed: int):
    """The `ray` module with a cluster running: joined (RAY_ADDRESS), kept (already running), or started
    here once per process, stopped at exit. A cluster started here with too few CPUs for this pool (its
    actors would wait forever) is restarted with enough."""
    global _STARTED_CPUS
    ray = _ray()
    if ray.is_initialized() and _STARTED_CPUS and cpus_needed > _STARTED_CPUS:
        ray.shutdown()
    if ray.is_initialized():
        return ray
    if "RAY_ADDRESS" in os.environ:
        ray.init(log_to_driver=False, configure_logging=False)  # join the cluster it names
        return ray
    cpus = max(cpus_needed, os.cpu_count() or 1)
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    if not _STARTED_CPUS:
        atexit.register(ray.shutdown)
    _STARTED_CPUS = cpus
    return ray


def startup_line(workers: int, threads: int) -> str:
    """What starting a pool of `workers` actors is about to do: start a local cluster, join RAY_ADDRESS's,
    or use the one this process runs already; then build the actors."""
    actors = (f"{workers} rollout worker{'s' if workers != 1 else ''} ({threads} thread{'s' if threads != 1 else ''}"
              f" each: a policy replica and an env, then the weights)")
    if _ray_running():
        if _STARTED_CPUS and workers * threads > _STARTED_CPUS:  # _start_ray restarts it with enough
            return f"restarting the local Ray cluster with {max(workers * threads, os.cpu_count() or 1)} CPUs and starting {actors}"
        return f"starting {actors} on the running Ray cluster"
    if "RAY_ADDRESS" in os.environ:
        return f"joining the Ray cluster at {os.environ['RAY_ADDRESS']} and starting {actors}"
    cpus = max(workers * threads, os.cpu_count() or 1)
    return f"starting a local Ray cluster ({cpus} CPUs) and {actors}"


def _ray_running() -> bool:
    """Whether Ray is initialised in this process, without importing it (a first import takes seconds)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


class RayPool:
    """N RolloutWorker actors; submit returns object refs, result gathers them in group order."""

    def __init__(self, cfg, model, workers: int, threads: int = 1):
        from bugfix_rl.progress import PhaseProgress

        # starting Ray and building the actors takes 10-40 s: said on stderr before, timed after (issue 38)
        with PhaseProgress(bars=False).phase(startup_line(workers, threads), done="rollout workers ready"):
            self._start(cfg, model, workers, threads)

    def _start(self, cfg, model, workers: int, threads: int) -> None:
        ray = _start_ray(workers * threads)
        self.actors = []
        gpus = torch.cuda.device_count()  # where there are GPUs each actor gets its share (a chat model's replica)
        try:
            actor = ray.remote(num_cpus=threads, num_gpus=gpus / workers if gpus else 0)(RolloutWorker)
            self.actors = [actor.remote(cfg, threads) for _ in range(workers)]
            self.version = -1
            ray.get(self.set_weights(model, 0))  # waits until every actor is built and holds the weights
        except BaseException:
            self.close(timeout=5.0)
            raise

    def set_weights(self, model, version: int) -> list:
        """Publish the learner's weights; every call submitted after this samples with them.
        Returns the actors' acknowledgements (object refs; nobody needs to wait for them)."""
        if version == self.version:
            return []
        ray = _ray()
        state = ray.put({k: v.detach().clone() for k, v in model.state_dict().items()})
        self.version = version
        return [actor.set_weights.remote(state, version) for actor in self.actors]

    def submit(self, tasks, group_size: int, temperature: float, generator: torch.Generator,
               first_group: int = 0) -> list:
        jobs = shard_jobs(tasks, group_size, first_group, temperature, len(self.actors), generator)
        return [self.actors[i % len(self.actors)].sample.remote(job) for i, job in enumerate(jobs)]

    def result(self, pending: list) -> list[Trajectory]:
        return [t for shard in _ray().get(pending) for t in shard]

    def close(self, timeout: float = 30.0) -> None:
        """Close the actors' sandboxes (best effort: a dead or hung actor is killed anyway) and kill the
        actors; Ray itself keeps running for the process's next pool. Never raises for a failed actor."""
        ray = _ray()
        try:
            ray.get([actor.close.remote() for actor in self.actors], timeout=timeout)
        except Exception as err:  # noqa: BLE001  (the run's own error, if any, is the one to report)
            print(f"warning: rollout workers did not close cleanly ({type(err).__name__}); killing them",
                  file=sys.stderr)
        finally:
            for actor in self.actors:
                ray.kill(actor)
            self.actors = []
