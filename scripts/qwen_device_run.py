"""A few GRPO steps of the Qwen3-0.6B architecture through bugfix-rl's own pipeline, timed.

    python scripts/qwen_device_run.py --out qwen_device.json             # one GPU; sized for < 8 min on an H200
    python scripts/qwen_device_run.py --tiny --out /tmp/qwen_tiny.json   # CPU, tiny model, < 60 s (a test runs it)
    python scripts/qwen_device_run.py --lab tools --out qwen_tools.json  # the book's tools-lab sizes, < 10 min on an H200
    python scripts/qwen_device_run.py --lab tools --tiny --out /tmp/t.json   # the same code path on CPU (a test)

`--lab tools` is the book's tools lab (conf/exp/qwen_tools.yaml: 8 prompts x 8 episodes, 6 turns of at
most 256 new tokens, micro-batches of 4, gradient checkpointing) for `--steps` (4) steps, in bf16 and
with the fastest sampler here: all 64 episodes of a turn in one generation batch, a static KV cache,
the decode step compiled (CUDA graphs) and grouped-query attention on the kv heads (sdpa_packed_gqa).
Then one step with the plain sampler (DynamicCache, eager) for the side by side (`--eager-steps`). If
the compiled step raises, the error goes into the result and the steps go on uncompiled. The plan
and the figures expected of it: docs/PERFORMANCE.md, "Qwen3 on a GPU: the plan".

Weights: Qwen/Qwen3-0.6B from the local Hugging Face cache when it is there (never downloaded), or
`--model DIR`; otherwise random weights on the Qwen3-0.6B architecture (tiny_qwen.QWEN3_0_6B, written
out by hand) with the stand-in tokenizer, and the output says so. Random weights never close a turn
(<|im_end|> is one of 151,936 ids), so every turn runs to max_new_tokens: the timing is an upper
bound, every reward is 0, and the update would skip every row; the script then forces advantages
of +-1 on each group (`advantages_forced` in the result) so the update's backward is timed.

For each env (edit menu, tools): preflight (the ten invariants, values reported, not enforced;
random weights fail checks 7-9, which need a reward signal), then `--steps` steps of sample ->
collate -> advantages -> the learner's update (policy_update with the run's AdamW).
Printed and written as JSON (schema in docs/QWEN.md): per step the generation and update seconds,
reward, policy tokens per episode, malformed calls, and the sampler-trainer log-prob gap (max,
mean, p99 over the first minibatch's policy tokens); per env the peak GPU memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch  # noqa: E402

from bugfix_rl.algo.advantage_stage import compute_advantages  # noqa: E402
from bugfix_rl.config import TrainConfig  # noqa: E402
from bugfix_rl.gym.envs import make_env_factory  # noqa: E402
from bugfix_rl.policy.build import build_policy, build_tokenizer_for  # noqa: E402
from bugfix_rl.rollout.collect import collect_step  # noqa: E402
from bugfix_rl.run.trainer import Trainer  # noqa: E402
from bugfix_rl.types import collate  # noqa: E402

HUB_ID = "Qwen/Qwen3-0.6B"
# Per env where it differs: the book's turn lengths (tools: 256 there, halved here for time) and micro-batches.
GPU_SIZES = dict(steps=3, group_size=8, prompts=4, turns=6, micro={"edit_menu": 8, "tools": 4},
                 new_tokens={"edit_menu": 64, "tools": 128}, preflight_rows=(2, 4))
TINY_SIZES = dict(steps=1, group_size=2, prompts=2, turns=2, micro={"edit_menu": 2, "tools": 2},
                  new_tokens={"edit_menu": 12, "tools": 12}, preflight_rows=(2, 2))
# --lab tools: conf/exp/qwen_tools.yaml's sizes (env.max_turns is the tools env's 6), and its CPU stand-in.
LAB_SIZES = {"tools": dict(steps=4, group_size=8, prompts=8, turns=6, micro={"tools": 4}, new_tokens={"tools": 256},
                           preflight_rows=(2, 4))}
LAB_TINY_SIZES = {"tools": dict(steps=2, group_size=2, prompts=2, turns=2, micro={"tools": 2}, new_tokens={"tools": 12},
                                preflight_rows=(2, 2))}
# The fastest sampler this stack offers (rollout/chat_sampler.py, policy/qwen3.py), and the plain one.
FAST_SAMPLER = dict(generation_cache="static", compile_decode=True, attn_implementation="sdpa_packed_gqa")
EAGER_SAMPLER = dict(generation_cache="dynamic", compile_decode=False)


def find_weights(model: str | None, tiny: bool, workdir: Path) -> tuple[str, str]:
    """(model directory or hub id, description)."""
    from bugfix_rl.recipes.tiny_qwen import QWEN3_0_6B, build_standin_tokenizer, cached_tiny_qwen, save_random_qwen3

    if model:
        return model, f"weights from {model}"
    if tiny:  # built once per machine, like the tests' model (without their warm start)
        cache = Path(os.environ.get("BUGFIX_RL_CACHE", Path.home() / ".cache" / "bugfix_rl"))
        return (str(cached_tiny_qwen(cache, warm=False)),
                "RANDOM weights on a tiny Qwen3 (hidden 64, 2 layers) with the stand-in tokenizer (--tiny)")
    if not tiny:
        try:
            from transformers import AutoConfig

            AutoConfig.from_pretrained(HUB_ID, local_files_only=True)
            return HUB_ID, f"real weights: {HUB_ID} from the local Hugging Face cache"
        except (OSError, ValueError):
            pass
    directory = save_random_qwen3(workdir / "model", build_standin_tokenizer(compact_prompts=False), QWEN3_0_6B)
    return str(directory), (f"RANDOM weights on the Qwen3-0.6B architecture (hidden 1024, 28 layers) with the "
                            f"stand-in tokenizer: no {HUB_ID} in the local HF cache")


def make_config(model: str, env: str, sizes: dict, args, sampler: dict | None = None) -> TrainConfig:
    cfg = TrainConfig()
    cfg.policy.name, cfg.policy.init, cfg.policy.model = "qwen3", "pretrained", model
    cfg.policy.dtype, cfg.policy.gradient_checkpointing = args.dtype, args.gradient_checkpointing
    cfg.policy.max_len, cfg.policy.max_new_tokens = 8192, sizes["new_tokens"][env]
    cfg.policy.generation_batch = args.generation_batch
    cfg.policy.attn_implementation = args.attn_implementation
    for key, value in (sampler or {}).items():
        if key != "attn_implementation":  # a load-time choice: the model is loaded once, with args'
            setattr(cfg.policy, key, value)
    cfg.env.name, cfg.env.max_turns = env, sizes["turns"]
    cfg.algo.group_size, cfg.algo.prompts_per_step = sizes["group_size"], sizes["prompts"]
    cfg.algo.micro_batch_size, cfg.algo.lr = sizes["micro"][env], args.lr
    return cfg


def grpo_step(trainer: Trainer, step: int, force_advantages: bool) -> dict:
    """Trainer.step's stages, timed apart (generation = sampling + env + grading; update = the rest)."""
    from bugfix_rl.rollout import chat_sampler

    algo = trainer.algo
    draw, positions = chat_sampler.sample_next, [0]

    def counted(logits, *rest):  # one call per sampled position of a generation batch: prefill or decode step
        positions[0] += 1
        return draw(logits, *rest)

    sync()
    t0 = time.perf_counter()
    chat_sampler.sample_next = counted
    try:
        rollouts = collect_step(trainer.pool, trainer.tasks, algo, trainer.generator, trainer.task_stats,
                                rename_operands=trainer.env.rename_operands)
    finally:
        chat_sampler.sample_next = draw
    sync()
    t1 = time.perf_counter()
    batch = collate(rollouts.kept, trainer.tokenizer.pad_id)
    compute_advantages(batch, rollouts.kept, algo, trainer.model.cfg.max_len)
    forced = force_advantages and bool((batch.advantages == 0).all())
    if forced:
        batch.advantages = torch.tensor([1.0, -1.0]).repeat(len(batch) // 2 + 1)[: len(batch)]
    metrics = trainer.learner.update(batch, algo, trainer.generator)
    sync()
    t2 = time.perf_counter()
    episodes = rollouts.kept
    policy_tokens = sum(t.policy_tokens for t in episodes)
    return {"step": step, "generation_s": t1 - t0, "update_s": t2 - t1, "step_s": t2 - t0,
            "advantages_forced": forced, "sampled_positions": positions[0],
            "generated_tokens_per_s": policy_tokens / (t1 - t0),
            "reward": sum(t.reward for t in episodes) / len(episodes),
            "policy_tokens_per_episode": sum(t.policy_tokens for t in episodes) / len(episodes),
            "tokens_per_episode": sum(len(t.ids) for t in episodes) / len(episodes),
            "malformed_per_episode": sum(t.info.malformed for t in episodes) / len(episodes),
            **{k: metrics[k] for k in ("logp_gap", "logp_gap_mean", "logp_gap_p99", "entropy", "grad_norm")}}


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def peak_gb() -> dict | None:
    if not torch.cuda.is_available():
        return None
    return {"allocated": torch.cuda.max_memory_allocated() / 2**30,
            "reserved": torch.cuda.max_memory_reserved() / 2**30}


def run_env(env: str, model, tokenizer, model_dir: str, sizes: dict, args, deadline: float, log,
            sampler: dict | None = None, label: str = "", steps: int | None = None, preflight: bool | None = None) -> dict:
    from bugfix_rl.run.preflight import check_batch, first_batch, preflight_trainer

    cfg = make_config(model_dir, env, sizes, args, sampler)
    model.cfg = cfg.policy  # same weights, this env's turn length and sampler
    model.static_decoder = None  # a fresh static cache per run: its buffers count in this run's peak memory
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    make_env, close_env = make_env_factory(cfg.env)
    tag = f"{env}{'/' + label if label else ''}"
    result = {"env": env, "max_new_tokens": cfg.policy.max_new_tokens, "episodes_per_step":
              cfg.algo.group_size * cfg.algo.prompts_per_step, "steps": []}
    if label:
        result["sampler"] = {"label": label, "generation_batch": cfg.policy.generation_batch,
                             "generation_cache": cfg.policy.generation_cache,
                             "compile_decode": cfg.policy.compile_decode,
                             "attn_implementation": model.lm.config._attn_implementation}
    preflight = args.preflight if preflight is None else preflight
    try:
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        if preflight:
            t0 = time.perf_counter()
            # one small first batch (the one-pass gradient check backpropagates all its rows at once; no
            # redraws for a learning signal, which random weights never have)
            prompts, group = sizes["preflight_rows"]
            algo = dataclasses.replace(cfg.algo, prompts_per_step=prompts, group_size=group)
            probe = preflight_trainer(dataclasses.replace(cfg, algo=algo), model, tokenizer, make_env)
            trajectories, batch = first_batch(probe, seed=args.seed)
            checks = check_batch(model, trajectories, batch, algo, tokenizer, max_action_tokens=0)
            result["preflight"] = {name: check["value"] for name, check in checks.items()}
            result["preflight_ok"] = {name: check["ok"] for name, check in checks.items()}
            result["preflight_s"] = time.perf_counter() - t0
            log(f"[{env}] preflight {result['preflight_s']:.1f}s: " + ", ".join(
                f"{name}={'ok' if ok else 'FAIL'}" for name, ok in result["preflight_ok"].items()))
        trainer = Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(args.seed))
        for step in range(sizes["steps"] if steps is None else steps):
            # start no step after the budget, nor one that would end past it at the last step's pace
            # (the first step of a later run: at args.reserve_s)
            last = result["steps"][-1]["step_s"] if result["steps"] else (args.reserve_s if args.lab else 0.0)
            if time.perf_counter() + last > deadline:
                result["stopped_early"] = "time budget spent"
                break
            try:
                row = grpo_step(trainer, step, args.force_advantages)
            except Exception as error:  # noqa: BLE001  the compiled step failing is a finding, not the end
                if not cfg.policy.compile_decode:
                    raise
                result["compile_error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
                log(f"[{tag}] the compiled decode step failed ({result['compile_error']}); going on uncompiled")
                cfg.policy.compile_decode = False
                result.setdefault("sampler", {})["compile_decode"] = False
                model.static_decoder = None
                row = grpo_step(trainer, step, args.force_advantages)
            result["steps"].append(row)
            log(f"[{tag}] step {step}: generation {row['generation_s']:.1f}s update {row['update_s']:.1f}s "
                f"reward {row['reward']:.2f} policy tokens/episode {row['policy_tokens_per_episode']:.0f} "
                f"gap max {row['logp_gap']:.2e} mean {row['logp_gap_mean']:.2e} p99 {row['logp_gap_p99']:.2e} "
                f"positions {row['sampled_positions']}")
        result["peak_gpu_gb"] = peak_gb()
        if result["peak_gpu_gb"]:
            log(f"[{tag}] peak GPU memory {result['peak_gpu_gb']['allocated']:.1f} GB allocated, "
                f"{result['peak_gpu_gb']['reserved']:.1f} GB reserved")
        steps = result["steps"]
        if steps:
            result["mean_generation_s"] = sum(s["generation_s"] for s in steps) / len(steps)
            result["mean_update_s"] = sum(s["update_s"] for s in steps) / len(steps)
        if len(steps) > 1:  # step 0 holds the compilation and the first allocations
            later = steps[1:]
            result["steady_generation_s"] = sum(s["generation_s"] for s in later) / len(later)
            result["steady_update_s"] = sum(s["update_s"] for s in later) / len(later)
            result["steady_step_s"] = result["steady_generation_s"] + result["steady_update_s"]
    finally:
        close_env()
        model.static_decoder = None
    return result


def lab_summary(runs: list[dict]) -> dict:
    """The figures the plan (docs/PERFORMANCE.md) predicts, side by side: seconds per step of each sampler
    (steps after the first where there are some), against the book's 67 s and the 15-s aim."""
    out = {"book_s_per_step": 20.0 * 60 / 18, "aim_s_per_step": 15.0}
    for run in runs:
        steps, name = run["steps"], run.get("sampler", {}).get("label", run["env"])
        if not steps:
            out[name] = None
            continue
        later = steps[1:] or steps
        row = {"s_per_step": sum(s["step_s"] for s in later) / len(later),
               "generation_s": sum(s["generation_s"] for s in later) / len(later),
               "update_s": sum(s["update_s"] for s in later) / len(later),
               "first_step_s": steps[0]["step_s"], "steps": len(steps),
               "sampled_positions": later[-1]["sampled_positions"],
               "peak_gpu_gb": (run.get("peak_gpu_gb") or {}).get("allocated"),
               "compile_error": run.get("compile_error")}
        row["ms_per_sampled_position"] = 1e3 * row["generation_s"] / max(1, row["sampled_positions"])
        out[name] = row
    if out.get("fast") and out.get("eager"):
        out["eager_over_fast_generation"] = out["eager"]["generation_s"] / out["fast"]["generation_s"]
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="the JSON result file")
    parser.add_argument("--tiny", action="store_true", help="tiny random Qwen3 on CPU (a test runs this)")
    parser.add_argument("--model", help="a local model directory (default: the HF cache's Qwen/Qwen3-0.6B)")
    parser.add_argument("--lab", choices=tuple(LAB_SIZES), help="the book's lab sizes, in bf16 with the fast sampler "
                        "(then --eager-steps with the plain one)")
    parser.add_argument("--envs", help="default edit_menu,tools; with --lab, the lab's env")
    parser.add_argument("--steps", type=int, help="GRPO steps per env (default 3; --tiny 1; --lab 4, --lab --tiny 2)")
    parser.add_argument("--eager-steps", type=int, help="--lab: steps with the plain sampler afterwards (default 1)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), help="default float32; --lab bfloat16")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=None,
                        help="default off; --lab on (the lab's)")
    parser.add_argument("--generation-batch", type=int, default=64)
    parser.add_argument("--attn-implementation", help="policy.attn_implementation (default: transformers' own; "
                        "--lab sdpa_packed_gqa)")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-s", type=float, help="start no new step after this many seconds, nor one that "
                        "would end after them at the last step's pace (default 420; --lab 480)")
    parser.add_argument("--reserve-s", type=float, default=120.0, help="--lab: time a run's first step is assumed "
                        "to need when the budget decides whether to start it")
    parser.add_argument("--preflight", action=argparse.BooleanOptionalAction, default=None,
                        help="run the ten invariants first (default: on, off with --tiny)")
    parser.add_argument("--no-force-advantages", dest="force_advantages", action="store_false")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    lab = args.lab
    if lab:
        sizes = dict((LAB_TINY_SIZES if args.tiny else LAB_SIZES)[lab])
    else:
        sizes = dict(TINY_SIZES if args.tiny else GPU_SIZES)
    if args.steps is not None:
        sizes["steps"] = args.steps
    defaults = dict(envs=lab or "edit_menu,tools", dtype="bfloat16" if lab else "float32",
                    gradient_checkpointing=bool(lab), budget_s=480.0 if lab else 420.0, eager_steps=1 if lab else 0,
                    attn_implementation=FAST_SAMPLER["attn_implementation"] if lab else "")
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.preflight is None:
        args.preflight = not args.tiny and not lab  # the lab check times steps; preflight: the default run
    if not args.tiny and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --tiny on a CPU")
    torch.set_num_threads(2 if args.tiny else torch.get_num_threads())

    def log(message: str) -> None:
        print(f"{time.perf_counter() - started:7.1f}s  {message}", flush=True)

    with tempfile.TemporaryDirectory(prefix="qwen_device_") as workdir:
        model_dir, weights = find_weights(args.model, args.tiny, Path(workdir))
        log(weights)
        cfg = make_config(model_dir, args.envs.split(",")[0], sizes, args)
        t0 = time.perf_counter()
        tokenizer = build_tokenizer_for(cfg)
        model = build_policy(cfg.policy, tokenizer)  # asserts the token path for both envs' schemas
        load_s = time.perf_counter() - t0
        log(f"loaded {model.num_parameters() / 1e6:.1f}M parameters on {model.device} in {load_s:.1f}s "
            f"(token path = chat template: ok)")
        result = {"weights": weights, "model": model_dir, "parameters": model.num_parameters(), "lab": lab,
                  "device": (torch.cuda.get_device_name() if torch.cuda.is_available()
                             else platform.processor() or "cpu"),
                  "dtype": args.dtype, "gradient_checkpointing": args.gradient_checkpointing,
                  "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                               "python": platform.python_version()},
                  "sizes": sizes, "load_s": load_s, "envs": []}
        deadline = started + args.budget_s
        for env in args.envs.split(","):
            if not lab:
                result["envs"].append(run_env(env, model, tokenizer, model_dir, sizes, args, deadline, log))
                continue
            result["envs"].append(run_env(env, model, tokenizer, model_dir, sizes, args, deadline, log,
                                          sampler=FAST_SAMPLER, label="fast"))
            if args.eager_steps:
                result["envs"].append(run_env(env, model, tokenizer, model_dir, sizes, args, deadline, log,
                                              sampler=EAGER_SAMPLER, label="eager", steps=args.eager_steps,
                                              preflight=False))
        if lab:
            result["summary"] = lab_summary(result["envs"])
            log("summary: " + json.dumps(result["summary"]))
        result["total_s"] = time.perf_counter() - started
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    log(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
