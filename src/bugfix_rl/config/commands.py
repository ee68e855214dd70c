"""The configs of the commands other than train's: `eval`, `export`, `report`, `plan` and `simulate`
(conf/<command>.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING


@dataclass
class EvalCommandConfig:
    """`bugfix-rl eval`."""

    ckpt: str = MISSING  # a checkpoint file, or a finished run dir (its chosen checkpoint: best validation)
    compare: Optional[str] = None  # a second checkpoint or run dir of the same env: paired difference ckpt - compare
    split: str = "test"  # train | val | test | heldout | shapes | shapes_val (checkpoint_eval.SPLITS)
    n: int = 32  # episodes per task
    seed: int = 4  # the evaluation's generator (4: the test seed train uses)
    threads: int = 2  # torch CPU threads
    top: int = 5  # most common action sequences shown
    out: Optional[str] = None  # also write the results as JSON to this file
    explain: bool = False  # failure analysis of the weak tasks (below explain_below): decoded failing episodes
    explain_below: float = 0.5  # explain=true: tasks whose pass rate is below this


@dataclass
class ExportConfig:
    """`bugfix-rl export`: a trained policy in the Hugging Face layout (src/bugfix_rl/commands/export.py)."""

    ckpt: str = MISSING  # a checkpoint file, or a finished run dir (its chosen checkpoint, as eval picks it)
    out: str = MISSING  # the folder to write; must not exist yet, or be empty


@dataclass
class ReportConfig:
    """`bugfix-rl report`."""

    dir: str = MISSING  # the sweep dir (Hydra's -m output, or any folder holding runs' eval.json)
    reference: str = ""  # the arm others are compared with; "" = `default` if a run has it, else the first by name


@dataclass
class ComputeBudget:
    """One RL run's accelerator cost (`bugfix-rl plan compute=true`); defaults: design-review question 19."""

    params: float = 32e9  # N, dense model parameters
    episodes_per_step: int = 512  # episodes per RL step
    tokens_per_episode: float = 24_000.0  # all tokens of an episode: prompt, observations, policy
    policy_tokens_per_episode: float = 6_000.0  # the decoded ones
    steps: int = 300  # RL steps
    peak_flops: float = 1e15  # dense bf16 FLOP/s of one accelerator
    mfu: float = 0.4  # model FLOPs utilisation of training
    decode_tokens_per_gpu_second: float = 1_000.0  # aggregate decode throughput per GPU (measure it)
    inference_busy: float = 0.25  # share of time the inference fleet is busy (tool waits, long tails)


@dataclass
class PlanConfig:
    """`bugfix-rl plan`: seeds x tasks x episodes for a comparison, a sweep's detectable effect, GPU-hours."""

    dir: str = ""  # a pilot sweep (report's layout): its variances, and the MDE of each comparison in it
    reference: str = ""  # the pilot's reference arm ("" as report's: `default`, else the first by name)
    seed_sd: float = 0.0  # without dir: sd of one arm's mean over seeds
    task_diff_sd: float = 0.0  # without dir: sd over tasks of a paired per-task difference
    test: str = "t"  # t (noncentral t) | z (normal; the book's table)
    effects: list[float] = field(default_factory=lambda: [0.10, 0.05, 0.02])  # differences in pass@1 to size a comparison for
    tasks: list[int] = field(default_factory=lambda: [10, 20, 50, 100])  # designs sized from a pilot
    episodes: list[int] = field(default_factory=lambda: [16, 64])  # episodes per task of the designs sized from a pilot
    alpha: float = 0.05  # two-sided significance level
    power: float = 0.8  # probability of detecting the effect
    compute: bool = False  # print the GPU-hour arithmetic of `budget` instead
    budget: ComputeBudget = field(default_factory=ComputeBudget)  # one RL run's accelerator cost (compute=true)


@dataclass
class SimulateConfig:
    """`bugfix-rl simulate`: a rollout-pipeline workload (defaults: design-review question 18's cluster).

    The model behind each field is described in src/bugfix_rl/commands/simulate.py; times are in seconds.
    """

    workers: int = 320  # episodes in flight at most (engine sequence slots, one container each)
    episodes_per_step: int = 512  # B: episodes the trainer needs per step
    update_seconds: float = 300.0  # trainer time per step (old/ref log-probs, update, weight sync); 300 ~ question 19
    steps: int = 20  # simulated trainer steps
    max_staleness: int = 1  # async column: generation runs ahead of the learner by at most this (>= 1)
    turns: float = 50.0  # mean turns per episode
    tail_sigma: float = 0.67  # lognormal sigma of the turn count (mean kept); 0.67: 5% of episodes > 3x median
    tokens_per_turn: float = 400.0  # policy tokens decoded per turn
    decode_tokens_per_second: float = 40.0  # per sequence, under load (measure it)
    tool_seconds: float = 8.0  # mean tool-call latency, one call per turn (exponential)
    startup_seconds: float = 180.0  # container start-up
    warm_pool: int = 0  # containers kept started ahead; 0 = every episode waits for a cold start
    target_step_minutes: float = 30.0  # for the printed Little's-law sizing only
    seed: int = 0  # the simulation's random stream
    # Calibration (this machine's own figures instead of the fields above): a run dir (or its
    # metrics.jsonl) whose steps sampled in one process or in Ray workers, synchronously. Its seconds
    # per episode (each step's sampling time x its workers / its episodes) replace the turn model,
    # its median update time update_seconds, its batch episodes_per_step; no container start-up.
    calibrate: Optional[str] = None  # a run dir or metrics.jsonl to calibrate from (see the comment above)
    episode_seconds: list[float] = field(default_factory=list)  # episode durations drawn from (empty: the turn model)
