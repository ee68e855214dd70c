"""Peak memory of one policy update on CPU, plain vs memory-frugal, at tiny Qwen3 size.

    python scripts/bench_qwen_memory.py                       # vocab 151,936 (Qwen3's head), 8 x 256 tokens
    python scripts/bench_qwen_memory.py --vocab 1045 --out /tmp/memory.json

The measure is the torch profiler's allocator tracking: the peak of "Total Allocated" bytes during
`policy_update` (so on top of the model, its optimizer state and the batch, which exist before). The
model is the tests' tiny Qwen3 (hidden 64, 2 layers) with a Qwen3-size vocabulary, so the logits
dominate as they do at 0.6B. The batch is synthetic: `--rows` episodes of `--length` tokens whose
last `--policy-frac` are policy tokens, advantages +-1 with `--zero-frac` of the rows at 0.

Variants, each adding one thing to the previous:
  plain            full [B, T, V] logits, one pass over the minibatch, every row backpropagated
  micro-batches    the same in micro-batches of --micro rows, one normaliser for the minibatch
  policy-head      LM head at policy positions only (QwenPolicy.token_logprobs)
  skip-zero-adv    rows with advantage 0 skip the backward (= the Qwen3 path's default update)
  checkpointing    + gradient checkpointing
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch  # noqa: E402

from bugfix_rl.algo import update as update_module  # noqa: E402
from bugfix_rl.config import AlgoConfig, PolicyConfig  # noqa: E402
from bugfix_rl.policy.qwen3 import FullLogits  # noqa: E402
from bugfix_rl.types import Batch  # noqa: E402



def synthetic_batch(rows: int, length: int, vocab: int, policy_frac: float, zero_frac: float) -> Batch:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, length), generator=generator)
    mask = torch.zeros(rows, length - 1)
    mask[:, int((length - 1) * (1 - policy_frac)):] = 1.0
    advantages = torch.tensor([1.0, -1.0]).repeat(rows // 2 + 1)[:rows]
    advantages[: int(rows * zero_frac)] = 0.0
    return Batch(ids, mask, torch.zeros(rows, length - 1), torch.zeros(rows), torch.arange(rows) // 2, advantages)


def peak_update_bytes(model, batch: Batch, algo, skip_zero_rows: bool) -> int:
    from torch.profiler import ProfilerActivity, profile

    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # no optimizer state: the update's own memory
    split = update_module.zero_advantage_split
    if not skip_zero_rows:
        update_module.zero_advantage_split = lambda mb, algo: [(slice(None), True)]
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            update_module.policy_update(model, optimizer, batch, algo, torch.Generator().manual_seed(0))
    finally:
        update_module.zero_advantage_split = split
    with tempfile.NamedTemporaryFile(suffix=".json") as trace:
        prof.export_chrome_trace(trace.name)
        events = json.load(open(trace.name))["traceEvents"]
    return max((e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"), default=0)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--policy-frac", type=float, default=0.25)
    parser.add_argument("--zero-frac", type=float, default=0.5)
    parser.add_argument("--micro", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from bugfix_rl.policy.qwen3 import ChatTokenizer, QwenPolicy
    from bugfix_rl.recipes.tiny_qwen import TINY_QWEN3, cached_tiny_qwen

    cache = Path(os.environ.get("BUGFIX_RL_CACHE", Path.home() / ".cache" / "bugfix_rl"))
    tokenizer = AutoTokenizer.from_pretrained(cached_tiny_qwen(cache, warm=False), local_files_only=True)
    torch.manual_seed(0)
    lm = Qwen3ForCausalLM(Qwen3Config(**dict(TINY_QWEN3, vocab_size=args.vocab)))
    batch = synthetic_batch(args.rows, args.length, args.vocab, args.policy_frac, args.zero_frac)
    one_pass = AlgoConfig(minibatches=1, micro_batch_size=0)
    micro = AlgoConfig(minibatches=1, micro_batch_size=args.micro)
    variants = [("plain", False, one_pass, False, False), ("micro-batches", False, micro, False, False),
                ("policy-head", True, micro, False, False), ("skip-zero-adv", True, micro, True, False),
                ("checkpointing", True, micro, True, True)]
    results = []
    for name, frugal, algo, skip, checkpointing in variants:
        policy_cfg = PolicyConfig(name="qwen3", gradient_checkpointing=checkpointing)
        model = (QwenPolicy(copy.deepcopy(lm), ChatTokenizer(tokenizer), policy_cfg) if frugal
                 else FullLogits(copy.deepcopy(lm)))
        peak = peak_update_bytes(model, batch, algo, skip)
        results.append({"variant": name, "peak_mb": peak / 2**20})
        print(f"{name:14s} peak {peak / 2**20:9.1f} MB", flush=True)
    summary = {"vocab": args.vocab, "rows": args.rows, "length": args.length, "policy_frac": args.policy_frac,
               "zero_frac": args.zero_frac, "micro": args.micro, "results": results,
               "torch": torch.__version__}
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    return results


if __name__ == "__main__":
    main()
