"""The environment's config group (`env=edit_menu` | `env=tools`, conf/env/): the env and its sandbox."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    generated_reshape: float = 0.0  # share of generated tasks whose body gets helper locals (gym/reshape.py)
    generated_grammar: float = 0.0  # share of generated tasks drawn from a fresh body form (gym/grammar.py)
    generated_grammar_flat_pairs: bool = False  # grammar minmax forms with two min/max lines drawn twice as often, with flat calls, so their two-line fix fits TinyAgent's turn
    generated_two_line_minmax: float = 0.0  # share of the generated minmax tasks replaced, after the draw, by grammar ones whose fix spans two lines (own stream: the rest unchanged)
    generated_two_line_compare: float = 0.0  # the same for the generated compare tasks: grammar ones with two comparisons on adjacent lines, both needed by the hidden tests
    reward: str = "hidden"  # hidden: all hidden tests pass; public: all public pass (hackable); partial; mixed
    partial_alpha: float = 0.1  # reward=mixed: 1[all hidden pass] + partial_alpha * fraction passed
    flaky_rate: float = 0.0  # each test outcome behind the reward flips with this probability
    reward_flip_rate: float = 0.0  # each grading's verdict (hidden/public reward) flips with this probability (gym/regrade.py)
    grade_reruns: int = 1  # grade the final state this many times (odd), each with fresh flips; the reward is the majority (gym/regrade.py)
    step_penalty: float = 0.0  # subtracted from the reward per turn
    truncation: str = "zero"  # an episode that ends unsubmitted: zero (paid 0) | grade (final code graded)
    leak_canary: bool = True  # hidden-only test input in an observation: edit menu stops the run; tools: episode pays 0
    max_calls_per_turn: int = 4  # tools env: calls executed per turn
    check_edit_syntax: bool = False  # tools env: an Edit that would leave a .py file unparseable is refused (syntax_error), as SWE-agent's edit linter does
    guide_old_string: bool = False  # tools env, TinyAgent: sampling holds an Edit's old_string to whole listed lines (policy/guided_edits.py)
    step_budget_s: float = 20.0  # tools env: wall clock of a step's sandbox runs (grading: 10 s a job; 20 fits a step)
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)  # tools: the sandbox's limits
    infra_fault_rate: float = 0.0  # tools, tests only: share of gradings the sandbox answers sandbox_error without running (every grading of the run, evaluations too)
