"""Process groups for the sharded learner: joining one under torchrun, or spawning one on this machine.

`bugfix-rl train trainer.world_size=N` spawns N processes here (gloo, plus nccl for CUDA tensors where
there is CUDA); under torchrun (RANK, WORLD_SIZE and MASTER_ADDR set, one or several nodes) each process joins
the group torchrun made. Either way rank r runs `fn(rank, *args)` with the default group initialised.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

def backend_for(name: str) -> str:
    """`auto`: gloo for CPU tensors plus nccl for CUDA ones where CUDA is there (a TinyAgent stays on
    the CPU, a chat model's weights and the update's statistics may not), else gloo."""
    if name != "auto":
        return name
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def under_torchrun() -> bool:
    return all(key in os.environ for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def _store_server(timeout: timedelta) -> dist.TCPStore:
    """The group's rendezvous store, listening on a port the kernel picks and this process holds from
    then on: a port probed free and closed again could be taken by another process before the ranks
    bind it. Ranks reach it by its `.port` (_joined)."""
    return dist.TCPStore("127.0.0.1", 0, None, True, timeout=timeout, wait_for_workers=False)


def join_torchrun_group(backend: str, timeout: timedelta) -> int:
    """Initialise the default group from torchrun's environment; returns this process's rank."""
    dist.init_process_group(backend_for(backend), timeout=timeout)
    _place_on_device()
    return dist.get_rank()


def spawn(fn, world_size: int, args: tuple = (), backend: str = "auto", timeout: timedelta = timedelta(minutes=5)) -> None:
    """Run fn(rank, *args) in `world_size` fresh processes on this machine, in one process group.
    Raises (torch.multiprocessing.ProcessRaisedException) if any rank fails."""
    import torch.multiprocessing as mp

    store = _store_server(timeout)  # held here until every rank is done
    mp.start_processes(_joined, args=(fn, world_size, store.port, backend_for(backend), timeout, args),
                       nprocs=world_size, start_method="spawn")


@contextmanager
def rank0_of_group(world_size: int, backend: str, follower, args: tuple = (), timeout: timedelta = timedelta(minutes=5)):
    """This process as rank 0 of a group of `world_size` on this machine, with ranks 1.. spawned to
    run follower(rank, *args). On a normal exit it waits for them; on an error it stops them, so a
    failed run never leaves processes behind."""
    import torch.multiprocessing as mp

    store, backend = _store_server(timeout), backend_for(backend)
    context = mp.start_processes(_follower, args=(follower, world_size, store.port, backend, timeout, args),
                                 nprocs=world_size - 1, start_method="spawn", join=False)
    try:
        dist.init_process_group(backend, store=store, rank=0, world_size=world_size, timeout=timeout)
        _place_on_device()
        yield
        dist.barrier()  # the followers' last collective (run/distributed._joined): then every rank tears down
        while not context.join():
            pass
    except BaseException as err:
        # A follower's failure reaches rank 0 as a broken connection: name the follower then. Rank 0's
        # own errors (bad config, preflight, Ctrl-C) stay as they are.
        broken = isinstance(err, (dist.DistError, mp.ProcessRaisedException, mp.ProcessExitedException)) \
            or type(err) is RuntimeError
        failure = _follower_failure(context) if broken else None
        for process in context.processes:
            if process.is_alive():
                process.terminate()
        if failure is not None:  # the cause, not the broken connection rank 0 saw
            raise LearnerRankFailed(failure) from None
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class LearnerRankFailed(RuntimeError):
    """A rank other than 0 of the learner exited (one line: which rank, and its last error line)."""


def _follower_failure(context) -> str | None:
    """What ended the first follower that exited with an error (its exception's last line, or its
    exit code or signal), or None if every follower is still running or ended cleanly."""
    import torch.multiprocessing as mp

    deadline = time.monotonic() + 30.0  # one that is failing closes its connection before it exits (a torch
                                        # process can take seconds to end on a busy machine; only failures wait)
    for process in context.processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for index, process in enumerate(context.processes):
        if process.is_alive() or process.exitcode == 0:
            continue
        try:
            context.join(timeout=0)
        except mp.ProcessRaisedException as raised:
            last = [line for line in str(raised).splitlines() if line.strip()][-1]
            return f"learner rank {index + 1} failed: {last}"
        except mp.ProcessExitedException:
            pass
        code = process.exitcode
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        return f"learner rank {index + 1} {how}; rank 0 stopped too"
    return None


def _follower(index: int, fn, world_size: int, port: int, backend: str, timeout: timedelta, args: tuple) -> None:
    _joined(index + 1, fn, world_size, port, backend, timeout, args)


def _joined(rank: int, fn, world_size: int, port: int, backend: str, timeout: timedelta, args: tuple) -> None:
    """Rank `rank` of the group whose store is reachable at 127.0.0.1:`port` (_store_server): fn(rank, *args)."""
    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    try:
        _place_on_device()
        fn(rank, *args)
        dist.barrier()  # no rank tears its gloo pairs down while another still uses them (a SIGABRT at exit)
    finally:
        dist.destroy_process_group()


def _place_on_device() -> None:
    if torch.cuda.is_available() and "nccl" in str(dist.get_backend()):
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", dist.get_rank())) % torch.cuda.device_count())


@contextmanager
def learner_ranks(cfg):
    """This process's rank in the learner's group for cfg.trainer (config.TrainerConfig): 0 with
    nothing started for one process; under torchrun, torchrun's rank in the group it set up; else 0,
    with ranks 1.. spawned on this machine to run run/lifecycle.follow_run."""
    trainer = cfg.trainer
    if trainer.world_size == 1:
        yield 0
        return
    if under_torchrun():
        from bugfix_rl.errors import UserError  # the CLI prints it as one line, exit 2

        if int(os.environ["WORLD_SIZE"]) != trainer.world_size:
            raise UserError(f"trainer.world_size={trainer.world_size} but torchrun started "
                              f"{os.environ['WORLD_SIZE']} processes")
        rank = join_torchrun_group(trainer.backend, timedelta(minutes=trainer.timeout_minutes))
        try:
            yield rank
        finally:
            dist.destroy_process_group()
        return
    with rank0_of_group(trainer.world_size, trainer.backend, _follow_run, (cfg,),
                        timedelta(minutes=trainer.timeout_minutes)):
        yield 0


def _follow_run(rank: int, cfg) -> None:
    from bugfix_rl.run.lifecycle import follow_run

    follow_run(cfg)
