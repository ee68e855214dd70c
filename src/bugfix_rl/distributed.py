"""Process groups for the sharded learner: joining one under torchrun, or spawning one on this machine.

`bugfix-rl train trainer.world_size=N` spawns N processes here (gloo on CPU, nccl where each rank has
a GPU); under torchrun (RANK, WORLD_SIZE and MASTER_ADDR set, one or several nodes) each process joins
the group torchrun made. Either way rank r runs `fn(rank, *args)` with the default group initialised.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(minutes=30)  # a rank waits this long at a collective (rank 0 validating, building a base)


def backend_for(name: str) -> str:
    """`auto`: nccl when CUDA is there, else gloo."""
    if name != "auto":
        return name
    return "nccl" if torch.cuda.is_available() else "gloo"


def under_torchrun() -> bool:
    return all(key in os.environ for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join_torchrun_group(backend: str) -> int:
    """Initialise the default group from torchrun's environment; returns this process's rank."""
    dist.init_process_group(backend_for(backend), timeout=TIMEOUT)
    _place_on_device()
    return dist.get_rank()


def spawn(fn, world_size: int, args: tuple = (), backend: str = "auto") -> None:
    """Run fn(rank, *args) in `world_size` fresh processes on this machine, in one process group.
    Raises (torch.multiprocessing.ProcessRaisedException) if any rank fails."""
    import torch.multiprocessing as mp

    init = f"tcp://127.0.0.1:{free_port()}"
    mp.start_processes(_joined, args=(fn, world_size, init, backend_for(backend), args), nprocs=world_size,
                       start_method="spawn")


def _joined(rank: int, fn, world_size: int, init: str, backend: str, args: tuple) -> None:
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world_size, timeout=TIMEOUT)
    try:
        _place_on_device()
        fn(rank, *args)
    finally:
        dist.destroy_process_group()


def _place_on_device() -> None:
    if dist.get_backend() == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", dist.get_rank())) % torch.cuda.device_count())
