"""bugfix-rl vs TRL's GRPOTrainer on the same work, interleaved in one process (docs/PERFORMANCE.md).

    pip install -e '.[bench]'               # trl is a benchmark dependency, never a runtime one
    python scripts/bench_vs_trl.py [--steps 4] [--repeats 3] [--threads 1 2] [--max-new 48]
    python scripts/bench_vs_trl.py --tinyagent      # TinyAgent's edit-menu step vs TRL on a Qwen3 of its size

The same work on both sides: the tests' tiny random Qwen3 (recipes/tiny_qwen.py: same weights, fp32),
the same single-turn edit-menu prompts (our chat template's rendering of the system prompt, the tool
schemas and the issue; TRL gets the rendered text, so both tokenise the same ids), 8 prompts x group 8,
the same completion limit, temperature 1 with no top-k / top-p, one optimizer step per batch (one
epoch, one minibatch), AdamW at lr 1e-6 without weight decay, no gradient checkpointing (TRL's GRPO default
turns it on), no KL term and no reference model, token-
mean loss (TRL's 'dapo'), group-scaled advantages. The reward is our hidden-test grader (the edit menu
env run on the completion: one turn, so the call is graded as the episode). A random model earns 0
nearly everywhere, and our update skips the backward of rows whose advantage is exactly 0; to compare
equal work, ours runs with an entropy bonus of 1e-12, which turns the skip off (every row runs its
backward, as in TRL) and moves no parameter measurably; the entropy's own gradient is extra work on our
side. Each step is timed from the start of sampling to the end of the optimizer step; the first step of
each run is a warm-up and is not counted.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import bugfix_rl  # noqa: F401  (pins the CPU kernels before torch loads)
import torch

ROOT = Path(__file__).resolve().parents[1]


def cache_dir() -> Path:
    import os

    return Path(os.environ.get("BUGFIX_RL_CACHE", Path.home() / ".cache" / "bugfix_rl"))


def our_config(model_dir: Path, max_new: int):
    from bugfix_rl.config import TrainConfig

    cfg = TrainConfig()
    cfg.policy.name, cfg.policy.init, cfg.policy.model = "qwen3", "pretrained", str(model_dir)
    cfg.policy.max_new_tokens, cfg.policy.max_len = max_new, 4096
    cfg.env.max_turns, cfg.env.rename = 1, False  # single turn: the completion is the episode
    cfg.algo.group_size, cfg.algo.prompts_per_step = 8, 8
    cfg.algo.epochs, cfg.algo.minibatches, cfg.algo.lr, cfg.algo.temperature = 1, 1, 1e-6, 1.0
    cfg.algo.entropy_coef = 1e-12  # no effect on the update, but every row then runs its backward, as in TRL
    cfg.preflight = False
    return cfg


def prompts(model_dir: Path, cfg) -> list[dict]:
    """One row per training task: the rendered prompt text and the task's name."""
    from bugfix_rl.gym.chat import EDIT_MENU_SYSTEM, EDIT_MENU_TOOLS
    from bugfix_rl.gym.edit_menu import EditMenuConfig, EditMenuEnv
    from bugfix_rl.gym.tasks import make_tasks
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.policy.chat_template import ChatTokenPath

    path = ChatTokenPath(build_tokenizer_for(cfg).hf)
    rows = []
    for task in make_tasks("train"):
        user = EditMenuEnv(task, EditMenuConfig(rename=False)).reset()
        messages = [{"role": "system", "content": EDIT_MENU_SYSTEM}, {"role": "user", "content": user}]
        rows.append({"prompt": path.render(messages, EDIT_MENU_TOOLS, add_generation_prompt=True), "task": task.name})
    return rows


def graded(task_name: str, text: str) -> float:
    """Our hidden-test grader on a one-turn episode (the reward our env pays)."""
    from bugfix_rl.gym.chat import edit_menu_words
    from bugfix_rl.gym.edit_menu import EditMenuConfig, EditMenuEnv
    from bugfix_rl.gym.tasks import make_tasks

    task = next(t for t in make_tasks("train") if t.name == task_name)
    env = EditMenuEnv(task, EditMenuConfig(rename=False, max_turns=1))
    env.step(edit_menu_words(text))
    return env.reward


def timed_steps(cfg, steps: int, seed: int) -> dict:
    """Seconds and generated tokens of `steps` training steps of our Trainer on `cfg`'s policy (the
    first step, a warm-up, is not counted); with the policy's parameter count."""
    from bugfix_rl.gym.envs import make_env_factory
    from bugfix_rl.policy.build import build_tokenizer_for
    from bugfix_rl.recipes.starting_policy import build_starting_policy
    from bugfix_rl.run.trainer import Trainer

    tokenizer = build_tokenizer_for(cfg)
    model = build_starting_policy(cfg.policy, tokenizer, env_cfg=cfg.env)
    make_env, close = make_env_factory(cfg.env)
    torch.manual_seed(seed)
    trainer = Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(seed))
    times, tokens = [], []
    try:
        for step in range(steps + 1):
            start = time.perf_counter()
            row = trainer.step(step)
            elapsed = time.perf_counter() - start
            if step:
                times.append(elapsed)
                tokens.append(row["policy_tokens"] * 64)
    finally:
        trainer.close()
        close()
    return {"seconds": times, "tokens": tokens, "parameters": sum(p.numel() for p in model.parameters())}


def run_ours(model_dir: Path, steps: int, max_new: int, seed: int) -> dict:
    return timed_steps(our_config(model_dir, max_new), steps, seed)


def run_trl(model_dir: Path, rows: list[dict], steps: int, max_new: int, seed: int, out_dir: Path) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    dataset = Dataset.from_list(rows * 8)  # 160 rows: 8 prompts per step for 20 steps at most

    def reward(completions, task, **_):
        return [graded(name, text) for name, text in zip(task, completions)]

    class Clock(TrainerCallback):
        def __init__(self):
            self.starts, self.seconds, self.lengths = {}, [], []

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.start)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                self.lengths.append(logs["completions/mean_length"])

    clock = Clock()
    config = GRPOConfig(output_dir=str(out_dir), per_device_train_batch_size=64, gradient_accumulation_steps=1,
                        num_generations=8, max_completion_length=max_new, temperature=1.0, top_p=1.0, top_k=0,
                        learning_rate=1e-6, weight_decay=0.0, lr_scheduler_type="constant", warmup_steps=0,
                        beta=0.0, num_iterations=1, epsilon=0.2, loss_type="dapo", scale_rewards="group",
                        max_steps=steps + 1, logging_steps=1, save_strategy="no", report_to="none",
                        use_cpu=True, bf16=False, fp16=False, seed=seed, dataloader_num_workers=0,
                        disable_dropout=True, log_completions=False,
                        gradient_checkpointing=False)  # TRL's GRPO default is True: recompute that ours does not do
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[clock])
    trainer.train()
    return {"seconds": clock.seconds[1:], "tokens": [length * 64 for length in clock.lengths[1:]]}


def run_tinyagent(steps: int, seed: int) -> dict:
    """TinyAgent's edit-menu GRPO step as a user runs it (the RL base, multi-turn episodes), with TRL's
    step shape: 8 prompts x group 8, one epoch, one minibatch, every row's backward (entropy 1e-12)."""
    from bugfix_rl.config import TrainConfig

    cfg = TrainConfig()
    cfg.algo.group_size, cfg.algo.prompts_per_step, cfg.algo.epochs, cfg.algo.minibatches = 8, 8, 1, 1
    cfg.algo.temperature, cfg.algo.entropy_coef = 1.0, 1e-12
    return timed_steps(cfg, steps, seed)


def matched_qwen3(directory: Path, target: int) -> tuple[Path, int]:
    """A random Qwen3 of the tests' tiny architecture and stand-in tokenizer whose MLP width makes its
    parameter count the nearest to `target` (each unit of width is 3 x hidden x layers parameters)."""
    from transformers import AutoModelForCausalLM

    from bugfix_rl.recipes.tiny_qwen import TINY_QWEN3, build_standin_tokenizer, save_random_qwen3

    tokenizer = build_standin_tokenizer()
    probe = save_random_qwen3(directory / "probe", tokenizer)
    count = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(probe).parameters())
    per_width = 3 * TINY_QWEN3["hidden_size"] * TINY_QWEN3["num_hidden_layers"]
    width = TINY_QWEN3["intermediate_size"] + round((target - count) / per_width)
    matched = save_random_qwen3(directory / "matched", tokenizer, {**TINY_QWEN3, "intermediate_size": width})
    return matched, sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(matched).parameters())


def tinyagent_main(args) -> None:
    """TinyAgent (bugfix-rl) against TRL's GRPOTrainer on a Qwen3 with as many parameters, interleaved."""
    import tempfile

    import transformers
    import trl

    from bugfix_rl.kernels import cpu_model

    results, parameters = {}, {}
    with tempfile.TemporaryDirectory() as models:
        for threads in args.threads:
            torch.set_num_threads(threads)
            for repeat in range(args.repeats):
                ours = run_tinyagent(args.steps, repeat)
                parameters["tinyagent"] = ours["parameters"]
                if "qwen3" not in parameters:
                    model_dir, parameters["qwen3"] = matched_qwen3(Path(models), ours["parameters"])
                    rows = prompts(model_dir, our_config(model_dir, args.max_new))
                with tempfile.TemporaryDirectory() as tmp:
                    theirs = run_trl(model_dir, rows, args.steps, args.max_new, repeat, Path(tmp))
                for name, run in (("tinyagent", ours), ("trl", theirs)):
                    results.setdefault((name, threads), []).append(run)
                    print(f"{name} threads={threads} repeat={repeat}: s/step {statistics.median(run['seconds']):.3f}",
                          file=sys.stderr, flush=True)
    print(f"| threads | TinyAgent, bugfix-rl ({parameters['tinyagent']:,} parameters) s/step | TRL, Qwen3 "
          f"({parameters['qwen3']:,} parameters) s/step | TRL / TinyAgent | TinyAgent tokens/s | TRL tokens/s |")
    print("|---|---|---|---|---|---|")
    table = []
    for threads in args.threads:
        row = {"threads": threads}
        for name in ("tinyagent", "trl"):
            runs = results[(name, threads)]
            row[name] = {"best_median_s_per_step": min(statistics.median(r["seconds"]) for r in runs),
                         "tokens_per_s": max(sum(r["tokens"]) / sum(r["seconds"]) for r in runs)}
        table.append(row)
        ours, theirs = row["tinyagent"], row["trl"]
        print(f"| {threads} | {ours['best_median_s_per_step']:.3f} | {theirs['best_median_s_per_step']:.3f} | "
              f"{theirs['best_median_s_per_step'] / ours['best_median_s_per_step']:.2f}x | "
              f"{ours['tokens_per_s']:.0f} | {theirs['tokens_per_s']:.0f} |")
    meta = {"cpu": cpu_model(), "torch": torch.__version__, "transformers": transformers.__version__,
            "trl": trl.__version__, "steps": args.steps, "max_new_tokens": args.max_new, "parameters": parameters}
    print(json.dumps(meta))
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "table": table}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--max-new", type=int, default=48)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--tinyagent", action="store_true",
                        help="TinyAgent's edit-menu step against TRL on a Qwen3 of matching parameter count")
    args = parser.parse_args()
    if args.tinyagent:
        tinyagent_main(args)
        return
    import tempfile

    import transformers
    import trl

    from bugfix_rl.kernels import cpu_model
    from bugfix_rl.recipes.tiny_qwen import cached_tiny_qwen

    model_dir = cached_tiny_qwen(cache_dir())
    rows = prompts(model_dir, our_config(model_dir, args.max_new))
    results = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        for repeat in range(args.repeats):  # interleaved: ours, then TRL, per repeat
            for name in ("bugfix-rl", "trl"):
                with tempfile.TemporaryDirectory() as tmp:
                    run = (run_ours(model_dir, args.steps, args.max_new, repeat) if name == "bugfix-rl"
                           else run_trl(model_dir, rows, args.steps, args.max_new, repeat, Path(tmp)))
                results.setdefault((name, threads), []).append(run)
                print(f"{name} threads={threads} repeat={repeat}: s/step {statistics.median(run['seconds']):.3f}",
                      file=sys.stderr, flush=True)
    table = []
    for threads in args.threads:
        row = {"threads": threads}
        for name in ("bugfix-rl", "trl"):
            medians = [statistics.median(r["seconds"]) for r in results[(name, threads)]]
            rates = [sum(r["tokens"]) / sum(r["seconds"]) for r in results[(name, threads)]]
            row[name] = {"best_median_s_per_step": min(medians), "tokens_per_s": max(rates), "repeats": len(medians)}
        row["speedup"] = row["trl"]["best_median_s_per_step"] / row["bugfix-rl"]["best_median_s_per_step"]
        table.append(row)
    meta = {"cpu": cpu_model(), "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "trl": trl.__version__, "steps": args.steps,
            "max_new_tokens": args.max_new, "model": str(model_dir.name)}
    print("| threads | bugfix-rl s/step | TRL s/step | TRL / bugfix-rl | bugfix-rl tokens/s | TRL tokens/s |")
    print("|---|---|---|---|---|---|")
    for row in table:
        ours, theirs = row["bugfix-rl"], row["trl"]
        print(f"| {row['threads']} | {ours['best_median_s_per_step']:.3f} | {theirs['best_median_s_per_step']:.3f} |"
              f" {row['speedup']:.2f}x | {ours['tokens_per_s']:.0f} | {theirs['tokens_per_s']:.0f} |")
    print(json.dumps(meta))
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "table": table}, indent=1))


if __name__ == "__main__":
    main()
