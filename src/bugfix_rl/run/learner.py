"""The learner: the policy's trainable copy, its optimizer and the update, in one process or sharded
over a process group (algo/data_parallel.py, launched by run/distributed.py).

In a sharded run rank 0 drives everything else (sampling, evaluation, checkpoints, logs: run/training.py)
from a full replica of the policy, and the other ranks run `follow`: they take part in each
collective rank 0 starts, announced by a broadcast message: an update on their share of the batch,
gathering the optimizer's state for a checkpoint, loading a checkpoint's. After each update the replica
gets the learner's weights (DDP: the replica is the learner's module; FSDP2: the shards are gathered
into it), as a rollout engine gets a trainer's.

Optimizer state leaves and enters in the one-process format (checkpoint.optimizer_tensors: parameter
index -> tensors), so a checkpoint written at one world size resumes at any other.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist

from bugfix_rl.algo.data_parallel import DataParallel, SingleProcess
from bugfix_rl.algo.update import policy_update


class Learner:
    """model: the policy as built (every rank builds it the same way); lr: Adam's (or the policy's own
    optimizer's, `make_optimizer`) learning rate."""

    def __init__(self, model: torch.nn.Module, lr: float, parallel=SingleProcess()):
        self.parallel, self.stopped = parallel, False
        self.sharded_weights = getattr(parallel, "strategy", None) == "fsdp"
        # The replica rank 0 samples, evaluates and saves; under FSDP2 the learner's copy holds shards.
        self.replica = copy.deepcopy(model) if self.sharded_weights and parallel.rank == 0 else model
        self.module = parallel.wrap(model)
        make_optimizer = getattr(model, "make_optimizer", None)  # a policy may bring its own (Qwen3: AdamW)
        self.optimizer = make_optimizer(lr) if make_optimizer else torch.optim.Adam(model.parameters(), lr=lr)
        self.base_lrs = [group["lr"] for group in self.optimizer.param_groups]  # what lr_factor multiplies

    @property
    def distributed(self) -> bool:
        return self.parallel.world_size > 1

    # ------------------------------------------------------------------ rank 0's calls

    def update(self, batch, algo, generator: torch.Generator, ref_model=None, lr_factor: float = 1.0) -> dict:
        """One policy update on `batch` (every rank: its share) at lr_factor times each parameter group's
        learning rate (algo/lr_schedule.py); the replica then holds the new weights."""
        self._tell("update", batch, generator.get_state(), lr_factor)
        return self._update(batch, algo, generator, ref_model, lr_factor)

    def optimizer_state(self) -> dict:
        """The optimizer's whole state_dict in the one-process format (rank 0's; gathered under FSDP2)."""
        self._tell("optimizer_state")
        return self._optimizer_state()

    def load_optimizer_state(self, state: dict) -> None:
        """Load a one-process-format optimizer state_dict (rank 0 passes it; every rank loads its part)."""
        self._tell("load_optimizer_state", bool(state["state"]))
        self._load_optimizer_state(state, bool(state["state"]))

    def stop_followers(self) -> None:
        """Let the other ranks return (once; later calls do nothing). Best effort: after Ctrl-C or a
        failed rank they may be gone already, and the error that matters is the one being raised
        (distributed.rank0_of_group names a failed rank)."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self._tell("stop")
        except RuntimeError:  # torch.distributed's DistBackendError: the connection to a rank is gone
            pass

    # ------------------------------------------------------------------ every rank

    def _tell(self, *message) -> None:
        if self.distributed:
            dist.broadcast_object_list([message], src=0)

    def _update(self, batch, algo, generator, ref_model, lr_factor: float) -> dict:
        for group, base_lr in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = base_lr * lr_factor  # (x 1.0 without a schedule: the same float)
        metrics = policy_update(self.module, self.optimizer, batch, algo, generator, ref_model, self.parallel)
        if self.sharded_weights:
            from bugfix_rl.algo.data_parallel import full_state_dict

            state = full_state_dict(self.module)  # a collective: every rank gathers
            if self.parallel.rank == 0:
                self.replica.load_state_dict(state)
        return metrics

    def _optimizer_state(self) -> dict:
        if not self.sharded_weights or not self.optimizer.state:  # (the same on every rank)
            # One process or DDP: every rank holds the whole state. No step taken yet: nothing to gather
            # (and torch.distributed.checkpoint would take a step at lr 0 to make some, counting it in
            # Adam's step and so changing its bias correction).
            return self.optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        full = get_optimizer_state_dict(self.module, self.optimizer,
                                        options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return _by_index(full) if self.parallel.rank == 0 else {}

    def _load_optimizer_state(self, state: dict | None, has_state: bool) -> None:
        if not self.distributed:
            self.optimizer.load_state_dict(state)
            return
        if not has_state:  # a checkpoint from before the first step: only the hyperparameters (lr, ...)
            box = [state["param_groups"] if self.parallel.rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            for group, saved in zip(self.optimizer.param_groups, box[0]):
                group.update({k: v for k, v in saved.items() if k != "params"})
            return
        if not self.sharded_weights:  # DDP: every rank loads rank 0's whole state
            box = [state if self.parallel.rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            self.optimizer.load_state_dict(box[0])
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        name_of = {id(p): name for name, p in self.module.named_parameters()}
        names = [name_of[id(p)] for group in self.optimizer.param_groups for p in group["params"]]  # optimizer order
        full = _by_name(state, names) if self.parallel.rank == 0 else {}
        set_optimizer_state_dict(self.module, self.optimizer, full,
                                 options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))


def data_parallel(trainer_cfg):
    """The update's row sharing for this process (algo/data_parallel.py): the default process group's
    rank under trainer.strategy ddp or fsdp (run/distributed.py made the group), else this process alone."""
    if trainer_cfg.strategy == "single":
        return SingleProcess()
    return DataParallel(trainer_cfg.strategy)


def follow(learner: Learner, algo, ref_model=None) -> None:
    """A rank other than 0: do what rank 0 announces until it says stop."""
    while True:
        box = [None]
        dist.broadcast_object_list(box, src=0)
        kind, *args = box[0]
        if kind == "stop":
            return
        if kind == "update":
            batch, generator_state, lr_factor = args
            generator = torch.Generator()
            generator.set_state(generator_state)
            learner._update(batch, algo, generator, ref_model, lr_factor)
        elif kind == "optimizer_state":
            learner._optimizer_state()
        elif kind == "load_optimizer_state":
            learner._load_optimizer_state(None, *args)
        else:
            raise RuntimeError(f"rank {dist.get_rank()}: unknown learner message {kind!r}")


def broadcast_weights(module: torch.nn.Module) -> None:
    """Every rank's `module` gets rank 0's parameters and buffers (before sharding: plain tensors)."""
    for tensor in module.state_dict().values():
        dist.broadcast(tensor, src=0)


def _by_index(full: dict) -> dict:
    """A name-keyed optimizer state_dict (torch.distributed.checkpoint) as optimizer.state_dict() gives it."""
    index = {name: i for i, name in enumerate(n for group in full["param_groups"] for n in group["params"])}
    groups = [{**group, "params": [index[n] for n in group["params"]]} for group in full["param_groups"]]
    return {"state": {index[name]: value for name, value in full["state"].items()}, "param_groups": groups}


def _by_name(state: dict, names: list[str]) -> dict:
    """The inverse of _by_index; names: the parameters' names in the optimizer's order."""
    groups = [{**group, "params": [names[i] for i in group["params"]]} for group in state["param_groups"]]
    return {"state": {names[i]: value for i, value in state["state"].items()}, "param_groups": groups}
