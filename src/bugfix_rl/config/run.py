"""The run's config (`bugfix-rl train`, conf/train.yaml): logging, evaluation, stopping rules, the cold
start, where episodes are sampled, the learner's processes, and `TrainConfig`, which holds every group."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bugfix_rl.config.algo import AlgoConfig
from bugfix_rl.config.env import EnvConfig
from bugfix_rl.config.policy import PolicyConfig


@dataclass
class LoggerConfig:
    """Where dashboard rows go."""

    console: bool = True  # rich progress bar + a dashboard row every `every` steps
    every: int = 5  # steps between two dashboard rows on the console
    jsonl: bool = True  # metrics.jsonl in the run dir
    wandb: bool = False  # also send the rows and the final evaluation to W&B (logger=wandb sets it)
    wandb_mode: str = "offline"  # offline | online | disabled
    wandb_project: str = "bugfix-rl"  # the W&B project runs are logged to
    tensorboard: bool = False  # also write the rows and the final evaluation to <run dir>/tensorboard/ (logger=tensorboard sets it)


@dataclass
class EvalConfig:
    """Checkpointing and evaluation during and after training."""

    ckpt_every: int = 0  # save + validate every N steps; 0 = only the final step
    n_val: int = 16  # episodes per validation task
    val_splits: list[str] = field(default_factory=lambda: ["val"])  # splits whose tasks, pooled, validate each checkpoint (best is chosen): val (the book's 5), shapes_val (50 new shapes)
    n_test: int = 32  # episodes per test task
    val_seed: int = 3  # validation generator (its own: never touches the training stream)
    test_seed: int = 4  # test generator (its own: base and chosen see the same stream)
    test: bool = True  # evaluate base and chosen checkpoint on the test tasks at the end
    heldout_n: int = 0  # >0: also evaluate the chosen checkpoint (and the start) on all 10 held-out tasks
    heldout_seed_offset: int = 100  # held-out generator seed = offset + run seed (arms share it)
    shapes_n: int = 0  # >0: also evaluate the start and the chosen checkpoint on the 50 `shapes` tasks (unseen templates)
    shapes_seed_offset: int = 200  # shapes (and shapes_val) generator seed = offset + run seed (its own: no other stream moves)
    shapes_val_n: int = 0  # >0: also evaluate the start and the chosen checkpoint on the 50 `shapes_val` tasks (choosing a recipe on new shapes; seed as shapes; not with shapes_val in val_splits)


@dataclass
class StartsConfig:
    """`bugfix-rl starts`: starting policies compared before RL (src/bugfix_rl/evaluate/starts.py)."""

    policies: list[str] = field(default_factory=lambda: ["rl_base", "sft", "scratch"])  # or checkpoint paths
    n: int = 16  # episodes per training task for pass@1 and pass@8
    group_size: int = 8  # one group per training task: informative groups, entropy, behaviour
    seed: int = 1  # pass@k stream; the groups use seed + 1


@dataclass
class StopConfig:
    """When to end training early (the book's §19.9 rules); eval.json records what fired. 0 = off."""

    patience: int = 0  # stop after this many checkpoints in a row without beating the best validation pass@1
    min_delta: float = 0.0  # ... by more than this
    gain: str = "point"  # what beating means: point (pass@1 > best + min_delta) | interval (above the best's 95% interval + min_delta)
    zero_adv_window: int = 0  # stop once zero_adv_frac has been above zero_adv_threshold for this many steps
    zero_adv_threshold: float = 0.7  # (the training signal is spent: most groups all-pass or all-fail)
    max_infra_share: float = 0.5  # stop once a step's share of infrastructure-failed episodes exceeds this; 1 = never
    collapse: str = "warn"  # the collapse alarm (stopping.collapse_reason): warn (stderr + dashboard) | stop (also end the run) | off
    collapse_window: int = 3  # steps in a row the collapse condition must hold
    collapse_entropy: float = 0.01  # policy entropy (nats per policy token) below which the policy counts as deterministic
    malformed_window: int = 20  # steps the malformed-call alarm fits its trend over (run/alarms.py); 0 = no alarm
    malformed_rise: float = 0.2  # alarm when malformed calls per episode rise by this much over the window (and t > 2)
    malformed_stop: bool = False  # end the run when the malformed-call alarm is on (else it warns only)
    kl_mu_prox_max: float = 0.05  # the mismatch alarm: warn when a step's KL(mu || pi_prox) per policy token (kl_mu_prox) exceeds this; 0 = no alarm
    kl_mu_prox_stop: bool = False  # end the run when the mismatch alarm is on (else it warns only)


@dataclass
class ColdStartConfig:
    """SFT before RL (`cold_start.enabled=true`), on demonstrations of the selected env."""

    enabled: bool = False  # run SFT on demonstrations before RL
    source: str = "oracle"  # oracle: scripted oracle on renamed training tasks | rejection: own successes
    demos: int = 20  # oracle demonstrations (one per training task when 20)
    renamed_operands: bool = False  # oracle demos on copies with operands renamed (teaches copying, not recall)
    rejection_per_task: int = 8  # rejection sampling: attempts per training task
    steps: int = 10  # SFT optimizer steps
    lr: float = 1e-3  # SFT learning rate
    batch_size: int = 16  # demonstrations per SFT step
    seed: int = 0  # the demonstrations and SFT minibatches (independent of the run seed, as in the book)


@dataclass
class RolloutConfig:
    """Where episodes are sampled and graded, and how far generation may run ahead of the learner.

    workers=0 samples in the trainer's process with the trainer's generator (the book's stream).
    workers=N splits each step's groups into N shards, each sampled from its own seed: in N Ray actors
    (engine=ray; each with its own policy replica and env, so its own sandbox) or one after another in
    the trainer's process (engine=local: the same episodes as engine=ray when threads equals
    rollout.worker_threads, for tests and debugging).
    max_staleness=k lets the batch of step s be sampled with the weights of step s-k while the learner
    trains on earlier batches (k=0: synchronous); stale samples need algo.tis_cap.
    """

    workers: int = 0  # 0: sample in the trainer's process; N: N shards (Ray actors or local, see above)
    engine: str = "ray"  # ray | local (used when workers > 0)
    max_staleness: int = 0  # steps generation may run ahead of the learner (0 = synchronous; > 0 needs algo.tis_cap)
    worker_threads: int = 1  # torch threads per Ray actor


@dataclass
class TrainerConfig:
    """The learner's processes (src/bugfix_rl/run/learner.py, algo/data_parallel.py, docs/SCALING.md).

    strategy=single trains in this process. ddp and fsdp share each minibatch's rows among
    world_size ranks with a global loss normaliser, so N ranks give the one-process update: ddp holds
    the whole model on each rank (TinyAgent), fsdp shards weights, gradients and Adam's moments with
    FSDP2 (Qwen3). world_size > 1 spawns that many processes on this machine; under torchrun (one node
    or several) torchrun's WORLD_SIZE must equal it. Rank 0 samples, evaluates and writes the run dir.
    """

    strategy: str = "single"  # single | ddp | fsdp
    world_size: int = 1  # learner processes (1 with single; >= 2 with ddp or fsdp)
    backend: str = "auto"  # auto (gloo, plus nccl for CUDA tensors where there is CUDA) | gloo | nccl
    timeout_minutes: float = 60.0  # how long a rank waits at a collective (rank 0 alone validates, evaluates, builds a base)


@dataclass
class BenchConfig:
    """`bugfix-rl bench`: the configured rollout path vs one process (src/bugfix_rl/commands/bench.py)."""

    repeats: int = 3  # interleaved repeats of each path; best and median are printed
    steps: int = 10  # training steps timed per repeat (0: sampling block only)
    baseline_threads: int = 2  # torch threads of the single-process path
    seed: int = 0  # repeat r samples with seed + r (the same for both paths)


@dataclass
class TrainConfig:
    env: EnvConfig = field(default_factory=EnvConfig)  # the environment: env=edit_menu | tools, env.* its knobs
    policy: PolicyConfig = field(default_factory=PolicyConfig)  # the policy: policy=tiny | qwen3, policy.* its knobs
    algo: AlgoConfig = field(default_factory=AlgoConfig)  # the RL objective and its sampling: algo=grpo | dapo | ...
    logger: LoggerConfig = field(default_factory=LoggerConfig)  # where dashboard rows go: console, metrics.jsonl, W&B, TensorBoard
    eval: EvalConfig = field(default_factory=EvalConfig)  # checkpointing, validation and the final evaluations
    stop: StopConfig = field(default_factory=StopConfig)  # early-stopping rules and alarms
    cold_start: ColdStartConfig = field(default_factory=ColdStartConfig)  # SFT before RL
    rollout: RolloutConfig = field(default_factory=RolloutConfig)  # where episodes are sampled, and how far ahead of the learner
    trainer: TrainerConfig = field(default_factory=TrainerConfig)  # the learner's processes (single, ddp, fsdp)
    bench: BenchConfig = field(default_factory=BenchConfig)  # `bugfix-rl bench` settings
    starts: StartsConfig = field(default_factory=StartsConfig)  # `bugfix-rl starts` settings
    steps: int = 60  # RL steps (each: prompts_per_step tasks x group_size episodes, then the update)
    seed: int = 0  # the run's seed: sampling stream and torch's initial state
    threads: int = 2  # torch CPU threads: results depend on it (see docs)
    preflight: bool = True  # run the preflight checks before training
    allow_failed_preflight: bool = False  # start even when a preflight check fails
    resume: Optional[str] = None  # a checkpoint of an earlier run (same config) or its run dir (its last one): continue from its step
    arm: str = "default"  # label of this run in an ablation (report groups runs by arm and seed)
    experiment: str = "default"  # name of the experiment (its outputs/ folder, W&B group); +exp=<name> sets it
