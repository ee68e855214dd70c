"""Config schemas: every default is written here once; the YAML files under conf/ only override.

The schemas are registered in Hydra's ConfigStore, so an unknown key or a value of the wrong type is
rejected when the config is composed; `validate` then checks the values that must come from a fixed
set and names the allowed ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class ConfigError(ValueError):
    """A config value is not allowed; the message is one line naming the key and the valid values."""


@dataclass
class SandboxLimits:
    """Limits of each sandbox job (a Bash test run, or the grading of an episode): `env.sandbox.*`."""

    timeout_s: float = 10.0  # wall clock per job, the book's; the job is killed past it
    cpu_s: int = 5  # RLIMIT_CPU: a busy loop dies here, before the wall clock runs out
    memory_mb: int = 1024  # RLIMIT_AS (address space)
    file_mb: int = 1  # RLIMIT_FSIZE: the largest file a job may write
    nproc: int = 32  # RLIMIT_NPROC for the job's uid (seccomp forbids fork and threads anyway)
    min_isolation: list[str] = field(default_factory=lambda: ["rlimits"])  # refuse to start below these layers
    workers: int = 2  # fork servers: jobs run in parallel (one per core is right for grading)


@dataclass
class EnvConfig:
    """The environment (`env=edit_menu` or `env=tools`)."""

    name: str = "edit_menu"  # edit_menu | tools
    max_turns: int = 6  # actions (edit menu) or assistant turns (tools) per episode
    max_edits: int = 1  # edit menu: edit attempts allowed, later ones refused
    rename: bool = True  # replace the function name by an unrelated one from the gym's pool
    rename_operands: bool = False  # RL tasks: each group's task with its operands renamed from OPERAND_POOL
    shape_variants: float = 0.0  # RL tasks: share of groups on a shape variant of the task (gym/shape_variants.py)
    generated_tasks: int = 0  # RL tasks: >0 adds this many generated ones (gym/generator.py) to the 20, drawn alike (RL base too)
    generated_seed: int = 0  # the generator's seed for env.generated_tasks (one pool for every run seed)
    reward: str = "hidden"  # hidden: all hidden tests pass; public: all public pass (hackable); partial; mixed
    partial_alpha: float = 0.1  # reward=mixed: 1[all hidden pass] + partial_alpha * fraction passed
    flaky_rate: float = 0.0  # each test outcome behind the reward flips with this probability
    reward_flip_rate: float = 0.0  # each grading's verdict (hidden/public reward) flips with this probability (regrade.py)
    grade_reruns: int = 1  # grade the final state this many times (odd), each with fresh flips; the reward is the majority (regrade.py)
    step_penalty: float = 0.0  # subtracted from the reward per turn
    truncation: str = "zero"  # an episode that ends unsubmitted: zero (paid 0) | grade (final code graded)
    leak_canary: bool = True  # hidden-only test input in an observation: edit menu stops the run; tools: episode pays 0
    max_calls_per_turn: int = 4  # tools env: calls executed per turn
    step_budget_s: float = 20.0  # tools env: wall clock of a step's sandbox runs (grading: 10 s a job; 20 fits a step)
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)  # tools: the sandbox's limits
    infra_fault_rate: float = 0.0  # tools, tests only: share of gradings the sandbox answers sandbox_error without running (every grading of the run, evaluations too)


@dataclass
class BaseRecipeConfig:
    """How the RL starting policy (`rl_base`) is made: behaviour cloning of a noisy scripted agent.

    The scripted agent knows the call format, reads first only with probability p_read and picks the
    right op after reading with probability p_right_after_read (else a random op), like a pretrained
    model that has seen such tools but not this task. The result is cached by its recipe's hash.
    """

    seed: int = 1234  # the scripted episodes and the behaviour-cloning minibatches
    threads: int = 2  # built with a fixed thread count, so every run and sweep starts from the same weights
    episodes: int = 2048  # scripted episodes on renamed training tasks
    steps: int = 450  # behaviour-cloning steps (600 until the rows were packed: docs/PERFORMANCE.md)
    batch_size: int = 64  # demonstrations per behaviour-cloning step
    lr: float = 3e-3  # behaviour-cloning learning rate
    lr_schedule: str = "constant"  # constant, or cosine: from lr to near 0 at the last step (algo/sft.py)
    length_buckets: bool = False  # random minibatches (packing removes their padding instead)
    pack_rows: int = 160  # each minibatch's demos packed into rows of this many tokens (0, or a copy head: padded)
    p_read: float = 0.12  # the scripted agent reads the code first with this probability
    p_right_after_read: float = 0.8  # after reading it picks the right op with this probability (else a random fix op)
    p_test: float = 0.35  # it runs the tests after its edit with this probability
    p_wander: float = 0.2  # it wanders (an extra read or test) before submitting with this probability
    p_malformed: float = 0.04  # a call is malformed with this probability
    p_exploit: float = 0.15  # a guess is the exploit about as often as any one fix op
    p_renamed_operands: float = 0.9  # share of episodes on copies with operands renamed from OPERAND_POOL
    variants_per_task: int = 8  # renamed copies per training task


@dataclass
class ToolsBaseRecipeConfig:
    """How the tools env's RL starting policy is made: behaviour cloning of `NoisyToolsPolicy`
    (policy/scripted_tools.py) on training tasks with operands renamed from OPERAND_POOL.

    The scripted agent knows the call syntax but reads first only with probability p_read, picks the
    right fix after reading with probability p_right_after_read, miscopies old_string with probability
    p_miscopy, and so on (see its docstring). Cached by the recipe's hash like `base`.
    """

    seed: int = 1234  # the scripted episodes and the behaviour-cloning minibatches
    threads: int = 2  # behaviour cloning 0.17 s/step on 2 threads against 0.27-0.34 on 1 (2-core Xeon)
    episodes: int = 1024  # scripted episodes
    steps: int = 1400  # behaviour-cloning steps
    batch_size: int = 32  # demonstrations per behaviour-cloning step
    lr: float = 3e-3  # behaviour-cloning learning rate
    lr_schedule: str = "constant"  # as policy.base.lr_schedule
    length_buckets: bool = True  # minibatches of demos of similar length (episodes vary 2-3x)
    pack_rows: int = 0  # no packing: the copy head reads each episode as one whole sequence
    p_read: float = 0.3  # the scripted agent Reads the file first with this probability (else edits from memory)
    p_read_after_fail: float = 0.3  # after a refused Edit (not_read) it reads with this probability, else gives up
    p_right_after_read: float = 0.6  # after reading it picks the right fix with this probability
    p_miscopy: float = 0.3  # old_string miscopied (an operand replaced by a remembered one) with this probability
    p_retry: float = 0.5  # after a miscopy it repeats the Edit correctly with this probability
    p_test: float = 0.4  # it runs the tests in the Edit's turn with this probability
    p_wander: float = 0.15  # an extra Read or test run with this probability
    p_malformed: float = 0.04  # a call is malformed with this probability
    p_renamed_operands: float = 0.9  # share of episodes on copies with operands renamed from OPERAND_POOL
    p_shape_variant: float = 0.0  # share of episodes on a shape variant of the task (gym/shape_variants.py)


@dataclass
class PolicyConfig:
    """The policy (`policy=tiny` or `policy=qwen3`)."""

    name: str = "tiny"  # tiny | qwen3
    init: str = "rl_base"  # tiny: rl_base | scratch | path to a checkpoint (e.g. an SFT one); qwen3: pretrained | a path
    d_model: int = 64  # tiny: width of the transformer's residual stream
    n_layers: int = 3  # tiny: transformer blocks
    n_heads: int = 4  # tiny: attention heads per block
    d_ff: int = 192  # tiny: hidden width of each block's MLP
    max_len: int = 256  # longest episode in tokens, prompt included
    cache_dir: str = ""  # rl_base cache; "" = $BUGFIX_RL_CACHE or ~/.cache/bugfix_rl
    base: BaseRecipeConfig = field(default_factory=BaseRecipeConfig)  # rl_base recipe of env=edit_menu
    tools_base: ToolsBaseRecipeConfig = field(default_factory=ToolsBaseRecipeConfig)  # rl_base of env=tools
    copy_head: bool = False  # tiny: pointer-generator output that can copy context tokens (policy/copy_head.py)
    copy_dim: int = 32  # tiny: copy head query/key width
    copy_ngram: int = 3  # tiny: copy head match features over the last n tokens
    copy_softcap: float = 0.0  # tiny: the copy head's learned attention score is capped at +-this (0 = no cap)
    copy_suffix_match: bool = False  # tiny: copy match features count only an unbroken run of the last n tokens
    copy_edit_align: bool = False  # tiny: copy feature for the old_string token aligned with the new_string one
    copy_edit_resume: bool = False  # tiny: copy feature for the old_string token a copy pointer says comes next
    copy_resume_next: bool = False  # tiny: copy feature for the old_string token after the pointed one, after a replacement
    copy_resume_cut: bool = False  # tiny: while that pointer is active, match features read only tokens it saw copied
    shared_identifier_embedding: bool = False  # tiny: operand names enter through one shared embedding
    model: Optional[str] = None  # qwen3: local directory or cached hub id
    allow_download: bool = False  # qwen3: never download weights unless this is set
    dtype: str = "float32"  # qwen3: float32 | bfloat16
    gradient_checkpointing: bool = False  # qwen3
    max_new_tokens: int = 128  # qwen3: tokens per assistant turn
    generation_batch: int = 64  # qwen3: episodes per batched generation (bounds KV-cache memory); 0 = all
    generation_cache: str = "dynamic"  # qwen3: sampler KV cache: dynamic (grows per token) | static (preallocated, fixed shapes; docs/QWEN.md)
    compile_decode: bool = False  # qwen3: torch.compile the static cache's one-token step (CUDA graphs on a GPU; CPU: traced only); not yet run on a GPU
    attn_implementation: str = ""  # qwen3: HF attention kernels (sdpa | eager | sdpa_packed_gqa | flash_attention_2 if installed); "" = transformers' default


@dataclass
class TurnCreditConfig:
    """Per-turn credit (algo/turn_credit.py, docs/ALGORITHMS.md "Per-turn credit"): each policy token's
    advantage gains coef * (its turn's discounted return of turn rewards - the same turn's mean over the
    group's other episodes). coef 0, the default, leaves every advantage as the outcome estimator gives it."""

    coef: float = 0.0  # weight of the turn-level advantage; 0 = off (outcome-only)
    malformed_cost: float = 0.5  # turn reward: minus this per malformed call in the turn
    unanswered_cost: float = 1.0  # turn reward: minus this on the last turn of an episode that ended without an answer
    gamma: float = 0.5  # discount of later turns' rewards in a turn's return (1: all count, 0: the turn's own only)


@dataclass
class AlgoConfig:
    """The RL objective and its sampling (book defaults; verl/TRL names in docs/ALGORITHMS.md)."""

    name: str = "grpo"  # the algorithm's label (conf/algo/<name>.yaml sets it with its knobs)
    group_size: int = 8  # episodes per task per step
    prompts_per_step: int = 8  # tasks per step
    temperature: float = 1.0  # sampler and trainer share it
    adv_mode: str = "grpo"  # grpo | dr_grpo | rloo | reinforce_pp
    adv_eps: float = 1e-6  # added to the group's reward std before dividing (grpo)
    overlong_buffer: int = 0  # DAPO soft overlong penalty over the last N tokens of the context; 0 = off
    dynamic_sampling: bool = False  # resample degenerate (all-equal reward) groups
    max_sample_rounds: int = 4  # dynamic sampling: rounds of resampling at most
    ratio_level: str = "token"  # token | sequence (GSPO)
    clip_low: float = 0.2  # ratio clipped below at 1 - clip_low (PPO's epsilon), in [0, 1)
    clip_high: float = 0.2  # > clip_low: DAPO clip-higher
    dual_clip: Optional[float] = None  # c > 1 caps the loss for A < 0 at -c*A
    loss_mode: str = "token_mean"  # token_mean | seq_mean_token_mean | seq_mean_token_sum | norm_const
    norm_const: Optional[float] = None  # loss_mode=norm_const: the constant normaliser
    kl_coef: float = 0.0  # KL to a frozen reference (the starting policy)
    kl_kind: str = "k3"  # k1 | k2 | k3
    kl_in_reward: bool = False  # subtract kl_coef * KL from the reward instead of adding it to the loss
    entropy_coef: float = 0.0  # entropy bonus
    tis_cap: Optional[float] = None  # truncated importance weights min(pi/mu, C); None = off
    tis_level: str = "token"  # token | sequence
    max_traj_gap: Optional[float] = None  # per-trajectory gap filter: an episode whose largest |log pi_prox - log mu| at a policy token exceeds this leaves the loss (gap_filtered counts them); None = off
    lr: float = 1e-3  # the policy's learning rate (Adam)
    epochs: int = 1  # passes over each step's batch
    minibatches: int = 2  # optimizer steps per epoch: the batch split into this many minibatches
    micro_batch_size: int = 0  # rows per gradient-accumulation micro-batch; 0 = whole minibatch
    # the trainer's forward on the episodes packed end to end, each row as wide as the longest episode,
    # where the policy takes packed rows (TinyAgent without a copy head; the copy head and chat models
    # read whole sequences, so they run on padded rows): the same values up to float summation order,
    # about 15% less update time (docs/PERFORMANCE.md)
    pack_rows: bool = True  # pack episodes into rows for the trainer's forward (see the comment above)
    max_grad_norm: float = 1.0  # gradient norm clipped to this before each optimizer step
    max_nonfinite_skips: int = 3  # optimizer steps in a row skipped for a NaN/inf loss or gradient norm before the run stops
    task_filter: bool = False  # drop tasks whose recent pass rate is 0 or 1 from the step's draw
    curriculum: bool = False  # draw tasks with weight growing as their recent pass rate falls
    turn_credit: TurnCreditConfig = field(default_factory=TurnCreditConfig)  # per-turn credit; off by default
    mask_infra: bool = True  # episodes whose reward the infrastructure decided (env_error, grading sandbox_error) leave advantages and pass rates (algo/infra_mask.py)
    canary_rate: float = 0.0625  # canary groups per training group: ceil(rate x prompts_per_step), at least 1, unsolvable tasks sampled each step for canary_reward, never trained on (canaries.py); 0 = none


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
    n_test: int = 32  # episodes per test task
    val_seed: int = 3  # validation generator (its own: never touches the training stream)
    test_seed: int = 4  # test generator (its own: base and chosen see the same stream)
    test: bool = True  # evaluate base and chosen checkpoint on the test tasks at the end
    heldout_n: int = 0  # >0: also evaluate the chosen checkpoint (and the start) on all 10 held-out tasks
    heldout_seed_offset: int = 100  # held-out generator seed = offset + run seed (arms share it)
    shapes_n: int = 0  # >0: also evaluate the start and the chosen checkpoint on the 50 `shapes` tasks (unseen templates)
    shapes_seed_offset: int = 200  # shapes generator seed = offset + run seed (its own: no other stream moves)


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
    malformed_window: int = 20  # steps the malformed-call alarm fits its trend over (alarms.py); 0 = no alarm
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
    """The learner's processes (src/bugfix_rl/learner.py, algo/data_parallel.py, docs/SCALING.md).

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
    """`bugfix-rl bench`: the configured rollout path vs one process (src/bugfix_rl/bench.py)."""

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


@dataclass
class EvalCommandConfig:
    """`bugfix-rl eval`."""

    ckpt: str = MISSING  # a checkpoint file, or a finished run dir (its chosen checkpoint: best validation)
    compare: Optional[str] = None  # a second checkpoint or run dir of the same env: paired difference ckpt - compare
    split: str = "test"  # train | val | test | heldout | shapes (checkpoint_eval.SPLITS)
    n: int = 32  # episodes per task
    seed: int = 4  # the evaluation's generator (4: the test seed train uses)
    threads: int = 2  # torch CPU threads
    top: int = 5  # most common action sequences shown
    out: Optional[str] = None  # also write the results as JSON to this file
    explain: bool = False  # failure analysis of the weak tasks (below explain_below): decoded failing episodes
    explain_below: float = 0.5  # explain=true: tasks whose pass rate is below this


@dataclass
class ExportConfig:
    """`bugfix-rl export`: a trained policy in the Hugging Face layout (src/bugfix_rl/export.py)."""

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

    The model behind each field is described in src/bugfix_rl/simulate.py; times are in seconds.
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


CHOICES = {
    "env.name": ("edit_menu", "tools"),
    "env.reward": ("hidden", "public", "partial", "mixed"),
    "env.truncation": ("zero", "grade"),
    "policy.name": ("tiny", "qwen3"),
    "policy.dtype": ("float32", "bfloat16"),
    "policy.generation_cache": ("dynamic", "static"),  # rollout/chat_sampler.py: GENERATION_CACHES
    "algo.adv_mode": ("grpo", "dr_grpo", "rloo", "reinforce_pp"),
    "algo.ratio_level": ("token", "sequence"),
    "algo.loss_mode": ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "norm_const"),
    "algo.kl_kind": ("k1", "k2", "k3"),
    "algo.tis_level": ("token", "sequence"),
    "logger.wandb_mode": ("offline", "online", "disabled"),
    "cold_start.source": ("oracle", "rejection"),
    "rollout.engine": ("ray", "local"),
    "trainer.strategy": ("single", "ddp", "fsdp"),
    "trainer.backend": ("auto", "gloo", "nccl"),
    "stop.collapse": ("warn", "stop", "off"),
    "stop.gain": ("point", "interval"),
    "policy.base.lr_schedule": ("constant", "cosine"),  # algo/sft.py: LR_SCHEDULES (test_packing checks they agree)
    "policy.tools_base.lr_schedule": ("constant", "cosine"),
}

POSITIVE = ("algo.group_size", "algo.prompts_per_step", "algo.temperature", "algo.lr", "algo.epochs",
            "algo.minibatches", "algo.max_sample_rounds", "env.max_turns", "threads", "eval.n_val",
            "eval.n_test", "algo.max_grad_norm", "algo.max_nonfinite_skips", "bench.repeats", "bench.baseline_threads", "cold_start.steps",
            "cold_start.batch_size", "cold_start.demos", "cold_start.rejection_per_task", "cold_start.lr",
            "steps", "trainer.world_size", "trainer.timeout_minutes", "stop.collapse_window", "stop.collapse_entropy",
            "env.sandbox.timeout_s", "env.sandbox.cpu_s", "env.sandbox.memory_mb", "env.sandbox.file_mb",
            "env.sandbox.nproc", "env.sandbox.workers")


def _get(cfg, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def set_dotted(cfg, key: str, value) -> None:
    """Set `a.b.c` on a config object (what a Hydra override does, for code that builds configs)."""
    node = cfg
    *parents, leaf = key.split(".")
    for part in parents:
        node = getattr(node, part)
    setattr(node, leaf, value)


def validate(cfg) -> None:
    """Raise ConfigError (one line) for a value outside its allowed set or range."""
    for key, allowed in CHOICES.items():
        value = _get(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{key}={value!r} is not allowed; valid values: {', '.join(allowed)}")
    for key in POSITIVE:
        if _get(cfg, key) <= 0:
            raise ConfigError(f"{key}={_get(cfg, key)!r} must be > 0")
    from bugfix_rl.sandbox.hardening import LAYERS  # stdlib only

    unknown = [layer for layer in cfg.env.sandbox.min_isolation if layer not in LAYERS]
    if unknown:
        raise ConfigError(f"env.sandbox.min_isolation: unknown layer {unknown[0]!r}; valid: {', '.join(LAYERS)}")
    if cfg.seed < 0:
        raise ConfigError(f"seed={cfg.seed} must be >= 0")
    if cfg.policy.copy_softcap < 0:
        raise ConfigError(f"policy.copy_softcap={cfg.policy.copy_softcap} must be >= 0 (0 = no cap)")
    for switch in ("copy_edit_align", "copy_edit_resume"):
        if getattr(cfg.policy, switch) and not (cfg.policy.copy_head and cfg.env.name == "tools"):
            raise ConfigError(f"policy.{switch} needs policy.copy_head=true and env=tools (it reads Edit's old/new)")
    if cfg.policy.compile_decode and cfg.policy.generation_cache != "static":
        raise ConfigError("policy.compile_decode needs policy.generation_cache=static (fixed shapes to compile)")
    for switch in ("copy_resume_cut", "copy_resume_next"):
        if getattr(cfg.policy, switch) and not cfg.policy.copy_edit_resume:
            raise ConfigError(f"policy.{switch} needs policy.copy_edit_resume=true (it reads the copy pointer)")
    algo = cfg.algo
    if algo.group_size < 2:
        raise ConfigError(f"algo.group_size={algo.group_size} must be >= 2 (group advantages need a group)")
    if algo.loss_mode == "norm_const" and not algo.norm_const:
        raise ConfigError("algo.loss_mode=norm_const needs algo.norm_const > 0")
    if algo.minibatches > algo.group_size * algo.prompts_per_step:
        raise ConfigError(f"algo.minibatches={algo.minibatches} exceeds the batch size")
    if not (0 <= algo.clip_low < 1 and 0 <= algo.clip_high < math.inf):
        raise ConfigError(f"algo.clip_low={algo.clip_low} must lie in [0, 1) and algo.clip_high={algo.clip_high} be >= 0"
                          " (the ratio is clipped to [1 - clip_low, 1 + clip_high])")
    if not 0 <= algo.canary_rate <= 1:
        raise ConfigError(f"algo.canary_rate={algo.canary_rate} must lie in [0, 1] (canary groups per training group; 0 = none)")
    if algo.max_traj_gap is not None and not algo.max_traj_gap >= 0:
        raise ConfigError(f"algo.max_traj_gap={algo.max_traj_gap} must be >= 0 (a bound on |log pi_prox - log mu|; null = off)")
    if algo.dual_clip is not None and algo.dual_clip <= 1:
        raise ConfigError(f"algo.dual_clip={algo.dual_clip} must be > 1")
    turn = algo.turn_credit
    if not (0 <= turn.coef < math.inf and 0 <= turn.malformed_cost < math.inf and 0 <= turn.unanswered_cost < math.inf
            and 0 <= turn.gamma <= 1):
        raise ConfigError("algo.turn_credit: coef, malformed_cost and unanswered_cost must be finite and >= 0, "
                          "gamma must lie in [0, 1]")
    _validate_rollout(cfg)
    _validate_trainer(cfg)
    if not cfg.env.step_budget_s > 0:
        raise ConfigError(f"env.step_budget_s must be > 0 (seconds per step), got {cfg.env.step_budget_s}")
    if cfg.env.name == "tools" and cfg.env.truncation != "zero":
        raise ConfigError("env.truncation is an edit-menu switch: the tools env always grades the final file")
    if not 0 <= cfg.env.shape_variants <= 1:
        raise ConfigError(f"env.shape_variants must lie in [0, 1] (a share of groups), got {cfg.env.shape_variants}")
    if cfg.env.generated_tasks < 0:
        raise ConfigError(f"env.generated_tasks={cfg.env.generated_tasks} must be >= 0 (0 = the book's 20 tasks only)")
    if not (0 <= cfg.env.flaky_rate <= 0.5 and 0 <= cfg.env.step_penalty < math.inf and 0 <= cfg.env.partial_alpha < math.inf):
        raise ConfigError("env.flaky_rate must lie in [0, 0.5]; env.step_penalty and env.partial_alpha must be >= 0")
    if not (0 <= cfg.env.reward_flip_rate <= 0.5 and cfg.env.grade_reruns >= 1 and cfg.env.grade_reruns % 2 == 1):
        raise ConfigError("env.reward_flip_rate must lie in [0, 0.5] and env.grade_reruns be odd and >= 1 (a majority, no tie)")
    if (cfg.env.reward_flip_rate > 0 or cfg.env.grade_reruns > 1) and cfg.env.reward not in ("hidden", "public"):
        raise ConfigError(f"env.reward_flip_rate and env.grade_reruns flip or vote on a pass/fail verdict: they need "
                          f"env.reward=hidden or public, not {cfg.env.reward}")
    stop = cfg.stop
    if stop.patience < 0 or stop.zero_adv_window < 0 or stop.min_delta < 0:
        raise ConfigError("stop.patience, stop.zero_adv_window and stop.min_delta must be >= 0 (0 = off)")
    if not 0 <= stop.zero_adv_threshold <= 1:
        raise ConfigError(f"stop.zero_adv_threshold={stop.zero_adv_threshold} must lie in [0, 1]")
    if not stop.kl_mu_prox_max >= 0:
        raise ConfigError(f"stop.kl_mu_prox_max={stop.kl_mu_prox_max} must be >= 0 (0 = no alarm)")
    if stop.malformed_window < 0 or stop.malformed_rise < 0:
        raise ConfigError("stop.malformed_window and stop.malformed_rise must be >= 0 (window 0 = no alarm)")
    if not (0 <= stop.max_infra_share <= 1 and 0 <= cfg.env.infra_fault_rate <= 1):
        raise ConfigError("stop.max_infra_share and env.infra_fault_rate must lie in [0, 1]")
    if cfg.env.infra_fault_rate > 0 and cfg.env.name != "tools":
        raise ConfigError("env.infra_fault_rate needs env=tools (the edit menu grades in-process, with no sandbox)")
    if stop.patience and not cfg.eval.ckpt_every:
        raise ConfigError("stop.patience counts checkpoints: set eval.ckpt_every too")


def _validate_rollout(cfg) -> None:
    rollout = cfg.rollout
    for key in ("workers", "max_staleness"):
        if getattr(rollout, key) < 0:
            raise ConfigError(f"rollout.{key}={getattr(rollout, key)} must be >= 0")
    if rollout.worker_threads <= 0:
        raise ConfigError(f"rollout.worker_threads={rollout.worker_threads} must be > 0")
    if rollout.max_staleness > 0 and cfg.algo.tis_cap is None:
        raise ConfigError(f"rollout.max_staleness={rollout.max_staleness} needs algo.tis_cap (the truncated "
                          "importance correction of stale samples), e.g. algo.tis_cap=2.0")


def _validate_trainer(cfg) -> None:
    trainer = cfg.trainer
    if (trainer.strategy == "single") != (trainer.world_size == 1):
        raise ConfigError(f"trainer.strategy={trainer.strategy} with trainer.world_size={trainer.world_size}: "
                          "single is one process; ddp and fsdp need trainer.world_size >= 2")
    if trainer.world_size > 1 and (cfg.rollout.workers > 0 or cfg.rollout.max_staleness > 0):
        raise ConfigError("a sharded learner (trainer.world_size > 1) samples in rank 0's process: use "
                          "rollout.workers=0 and rollout.max_staleness=0 with it")


def resumed_tag(resume) -> str:
    """The run dir's suffix naming a resumed run's origin: `_from_<origin>_step_<N>` ("" without resume),
    the origin by its start time when its name begins with one (conf/train.yaml's run dirs): a resumed
    run's name stays 67 characters (default arm), not 108, and a resume of a resume no longer grows it.
    Used by conf/train.yaml's hydra.run.dir as ${resumed_tag:${resume}}."""
    import re

    if not resume:
        return ""
    checkpoint = Path(str(resume))
    origin = checkpoint.resolve().parent.parent.name
    started = re.match(r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}", origin)
    return f"_from_{started.group(0) if started else origin}_{checkpoint.stem}"


def register_configs() -> None:
    from omegaconf import OmegaConf

    from bugfix_rl.sweeps import arm_label

    if not OmegaConf.has_resolver("resumed_tag"):
        OmegaConf.register_new_resolver("resumed_tag", resumed_tag)
    if not OmegaConf.has_resolver("arm_label"):  # a sweep's arm names (sweeps.py)
        OmegaConf.register_new_resolver("arm_label", arm_label)
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="eval_schema", node=EvalCommandConfig)
    cs.store(name="export_schema", node=ExportConfig)
    cs.store(name="report_schema", node=ReportConfig)
    cs.store(name="simulate_schema", node=SimulateConfig)
    cs.store(name="plan_schema", node=PlanConfig)
