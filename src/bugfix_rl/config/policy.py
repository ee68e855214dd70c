"""The policy's config group (`policy=tiny` | `policy=qwen3`, conf/policy/): the model, and the recipes of
the RL starting policies (`rl_base`) it is built from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


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
    (gym/agents/scripted_tools.py) on training tasks with operands renamed from OPERAND_POOL.

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
    p_fix_after_fail: float = 0.0  # after its tests fail on a wrong fix, it Edits the right fix with this probability
    p_syntax_slip: float = 0.0  # its right Edit first breaks the file with this probability (refused: demonstrations check Edits' syntax), then comes right
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
    copy_lookup: bool = False  # tiny: a third copy output writing the pointed old_string token or a listed line's next one, with its own gate
    copy_lookup_feed: bool = False  # tiny: the lookup's target token, embedded and projected, added to h_t before the word head and the gates
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
