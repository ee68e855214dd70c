"""A tiny random Qwen3 with a stand-in tokenizer, saved like a real checkpoint, for tests and for
`scripts/qwen_device_run.py` when no Qwen weights are cached.

Qwen's tokenizer cannot be downloaded here, so the stand-in is a byte-level BPE trained on the gym's
chat texts (both envs' prompts, tool schemas, files, listings, tool calls and responses) with Qwen2/3's
pre-tokenizer split, Qwen3's 26 added tokens (<|endoftext|>, <|im_start|>, <|im_end|>, <tool_call>, ...,
in Qwen3's order and with its special flags) and Qwen3's chat template. `save_random_qwen3` writes
config, weights and tokenizer with save_pretrained, so the policy loads it through the same
from-directory path as a real model.

`warm_start` behaviour-clones the random model on a few scripted episodes (read, then a right or a
wrong fix, then submit / the final answer), so that sampled episodes sometimes succeed and groups
carry non-zero advantages: the preflight invariants need that, as the RL base does for TinyAgent.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import tempfile
from pathlib import Path

import torch

from bugfix_rl.gym.chat import EditMenuChat, ToolsChat
from bugfix_rl.gym.edit_menu import RENAME_POOL, EditMenuConfig, EditMenuEnv
from bugfix_rl.gym.ops import apply_op
from bugfix_rl.gym.tasks import ALL_OPS, FIX_OPS, Task, make_tasks
from bugfix_rl.gym.tools.env import ToolsEnv, ToolsEnvConfig
from bugfix_rl.policy.chat_template import ChatTokenPath, Transcript
from bugfix_rl.policy.qwen3_template import PRETOKENIZE_PATTERN, QWEN3_ADDED_TOKENS, QWEN3_CHAT_TEMPLATE

# Test size (SPEC §3): 2 layers, hidden 64, 4 query / 2 key-value heads of 16.
TINY_QWEN3 = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  intermediate_size=128, tie_word_embeddings=True, rope_theta=1e6, max_position_embeddings=4096)
# Qwen/Qwen3-0.6B's config.json, written out so the device script can build the architecture offline.
QWEN3_0_6B = dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                  intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6,
                  max_position_embeddings=40960, rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False)


def tool_call(name: str, arguments: dict) -> str:
    """One call as Qwen3's template teaches it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


# ---------------------------------------------------------------- scripted chat episodes

def edit_menu_turns(env: EditMenuEnv, rng: random.Random, p_right: float) -> list[tuple[str, list[str]]]:
    """Read, test, one edit (the right op with probability p_right), submit: [(turn text, responses)]."""
    op = env.task.fix_op if rng.random() < p_right else rng.choice([o for o in ALL_OPS if o != env.task.fix_op])
    turns = []
    for name, arguments in (("read", {}), ("test", {}), ("edit", {"op": op}), ("submit", {})):
        text = tool_call(name, arguments)
        turns.append((text, EditMenuChat().step(env, text)))
    return turns


def tools_turns(env: ToolsEnv, rng: random.Random, p_right: float) -> list[tuple[str, list[str]]]:
    """Read the source, Edit its first differing line (right fix with probability p_right, else a wrong
    op's), then the final answer (not stepped: grading needs the sandbox). [(turn text, responses)]"""
    path = f"/repo/{env.source_path}"
    turns = [(tool_call("Read", {"file_path": path}), None)]
    source = env.files[env.source_path]
    ops = [env.task.fix_op] if rng.random() < p_right else [o for o in FIX_OPS if o != env.task.fix_op]
    fixed = next((f for f in (apply_op(env.task, source, op) for op in ops) if f and f != source), source + "\n")
    old, new = _first_changed_line(source, fixed)
    turns.append((tool_call("Edit", {"file_path": path, "old_string": old, "new_string": new}), None))
    turns = [(text, env.step_json(text)) for text, _ in turns]
    return turns + [("I fixed the bug.", [])]


def _first_changed_line(before: str, after: str) -> tuple[str, str]:
    from bugfix_rl.gym.agents.scripted_tools import line_edit

    return line_edit(before, after)


def scripted_conversations(tasks: list[Task], names: list[str | None], seed: int = 0, p_right: float = 0.5):
    """(front-end, env, user message, turns) for every task x name x env kind."""
    rng = random.Random(seed)
    for task in tasks:
        for name in names:
            env = EditMenuEnv(task, EditMenuConfig(), name)
            front = EditMenuChat()
            user = front.user_message(env)
            yield front, user, edit_menu_turns(env, rng, p_right)
            env = ToolsEnv(task, ToolsEnvConfig(), name)
            front = ToolsChat()
            yield front, front.user_message(env), tools_turns(env, rng, p_right)


def episode_ids(path: ChatTokenPath, front, user: str, turns) -> Transcript:
    """A scripted episode as the sampler would build it (turn ids canonical)."""
    transcript = Transcript(path.prompt_ids(front.system, user, front.tools))
    for text, responses in turns:
        sampled = path.encode_turn(text) + [path.end_of_turn_id]
        transcript.add_sampled(sampled, [0.0] * len(sampled))
        if responses:
            transcript.add_observation(path.observation_ids(responses))
    return transcript


# ---------------------------------------------------------------- the stand-in tokenizer

def _renderer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    plain = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    renderer = PreTrainedTokenizerFast(tokenizer_object=plain, unk_token="<unk>")
    renderer.chat_template = QWEN3_CHAT_TEMPLATE
    return renderer


def _fixed_prompt_texts() -> list[str]:
    """The system block's fixed pieces (each env's system prompt and tool schemas as the template
    renders them, the template's tool preamble and its closing line) for both envs."""
    texts = []
    for front in (EditMenuChat(), ToolsChat()):
        block = _renderer().apply_chat_template([{"role": "system", "content": front.system}], tools=front.tools,
                                                tokenize=False)
        head, _, rest = block.partition("<tools>\n")
        tools, _, tail = rest.partition("\n</tools>")
        texts += [front.system, head[len("<|im_start|>system\n") + len(front.system):] + "<tools>",
                  *tools.split("\n"), "</tools>" + tail.split("<tool_call>")[0]]
    return list(dict.fromkeys(texts))


def _corpus() -> list[str]:
    """Rendered chat conversations over all tasks and a few names (both envs), for training the BPE."""
    renderer = _renderer()
    texts = []
    for front, user, turns in scripted_conversations(make_tasks("all"), [None, *RENAME_POOL[:4]], p_right=0.5):
        messages = [{"role": "system", "content": front.system}, {"role": "user", "content": user}]
        for text, responses in turns:
            messages.append({"role": "assistant", "content": text})
            messages += [{"role": "tool", "content": r} for r in responses]
        texts.append(renderer.apply_chat_template(messages, tools=front.tools, tokenize=False,
                                                  add_generation_prompt=True, enable_thinking=False))
    return texts


def build_standin_tokenizer(vocab_size: int = 1024, compact_prompts: bool = True):
    """A PreTrainedTokenizerFast with Qwen3's added tokens, pre-tokenizer and chat template.

    compact_prompts: also make each fixed piece of the system block (system prompts, tool schemas,
    the template's tool preamble) one token, so that CPU tests run on short contexts."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    bpe.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(_corpus(), trainer)
    from tokenizers import AddedToken

    for token, special in QWEN3_ADDED_TOKENS.items():  # one at a time: ids in Qwen3's order
        (bpe.add_special_tokens if special else bpe.add_tokens)([AddedToken(token, special=special, normalized=False)])
    if compact_prompts:  # a real tokenizer spends ~600 tokens here; the tiny model's contexts stay short
        bpe.add_tokens([AddedToken(t, special=False, normalized=False) for t in _fixed_prompt_texts()])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        clean_up_tokenization_spaces=False, model_max_length=131072)
    tokenizer.chat_template = QWEN3_CHAT_TEMPLATE
    return tokenizer


# ---------------------------------------------------------------- the model

def save_random_qwen3(directory: str | Path, tokenizer, architecture: dict = TINY_QWEN3, seed: int = 0,
                      dtype: torch.dtype = torch.float32) -> Path:
    """Random Qwen3 weights (vocab = the tokenizer's unless given) + the tokenizer, via save_pretrained."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    directory = Path(directory)
    settings = dict(architecture)
    settings.setdefault("vocab_size", len(tokenizer))
    config = Qwen3Config(**settings, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=None)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(dtype)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def warm_start(directory: str | Path, steps: int = 150, seed: int = 0, lr: float = 3e-3, batch_size: int = 8,
               tasks: list[Task] | None = None, p_right: float = 0.5) -> dict:
    """Behaviour-clone the saved model in `directory` on scripted episodes of `tasks` (default: the
    first two training tasks, unrenamed), then save it back. Returns {'first_loss', 'last_loss'}."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = Path(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype=torch.float32)
    path = ChatTokenPath(tokenizer)
    tasks = tasks or make_tasks("train")[:2]
    episodes = [episode_ids(path, front, user, turns)
                for repeat in range(8)
                for front, user, turns in scripted_conversations(tasks, [None], seed=seed + repeat, p_right=p_right)]
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        chosen = torch.randint(len(episodes), (batch_size,), generator=generator).tolist()
        length = max(len(episodes[i].ids) for i in chosen)
        ids = torch.full((batch_size, length), tokenizer.pad_token_id)
        labels = torch.full((batch_size, length), -100)
        for row, i in enumerate(chosen):
            episode = episodes[i]
            ids[row, : len(episode.ids)] = torch.tensor(episode.ids)
            labels[row, : len(episode.ids)] = torch.where(torch.tensor(episode.policy_mask),
                                                          torch.tensor(episode.ids), torch.tensor(-100))
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    model.save_pretrained(directory)
    return {"first_loss": losses[0], "last_loss": losses[-1]}


WARM_START = dict(steps=150, lr=5e-3, batch_size=8, seed=0, p_right=0.5)


def tiny_qwen_name(warm: bool = True) -> str:
    """The tiny Qwen3 directory's name, `tiny_qwen3_<key>`, keyed by what it depends on: the system
    prompts and tool schemas, the template and its added tokens, this module, the library versions."""
    import transformers

    key = hashlib.sha256(json.dumps({
        "prompts": _fixed_prompt_texts(), "template": QWEN3_CHAT_TEMPLATE, "added_tokens": QWEN3_ADDED_TOKENS,
        "source": Path(__file__).read_text(),
        "recipe": WARM_START if warm else None, "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0]}, sort_keys=True).encode()).hexdigest()[:16]
    return f"tiny_qwen3_{key}"


def cached_tiny_qwen(cache_dir: str | Path, warm: bool = True) -> Path:
    """The tiny Qwen3 directory (stand-in tokenizer, random weights, warm-started unless warm=False),
    built once (minutes on a busy CPU) and kept under cache_dir as tiny_qwen_name(warm)."""
    directory = Path(cache_dir) / tiny_qwen_name(warm)
    if (directory / "config.json").is_file():
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=".tiny_qwen3_"))
    try:
        save_random_qwen3(staging, build_standin_tokenizer())
        if warm:
            warm_start(staging, **WARM_START)
        staging.rename(directory)  # atomic: a concurrent builder's copy wins, ours is dropped
    except OSError:
        if not (directory / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory
