"""Write docs/RESULTS.md from a capstone run dir and an ablation sweep dir, plus two experiments run here:
the behaviour analysis of the chosen checkpoint and the 1-thread vs 2-thread reproducibility check.

    .venv/bin/python scripts/make_results.py --capstone <run dir> --ablation <sweep dir> [--out docs/RESULTS.md]

Every number in the output comes from those runs or from this script's own sampling, with its
interval, seed count and task count. scripts/reproduce.sh runs the whole chain from scratch.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import time
from pathlib import Path

import bugfix_rl  # noqa: F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch

from bugfix_rl.config import StopConfig, TrainConfig
from bugfix_rl.evaluate.ablation import build_report
from bugfix_rl.evaluate.episodes import failure_analysis, failure_lines
from bugfix_rl.evaluate.evaluate import action_sequences, behaviour_stats, per_task_table, sample_trajectories, success_counts
from bugfix_rl.evaluate.stats import pass_rate_summary
from bugfix_rl.gym.envs import make_env_factory, oracle_for
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.build import build_policy, build_tokenizer_for
from bugfix_rl.present.ablation_report import forest_rows, power_lines, table_cells, table_header, verdicts
from bugfix_rl.present.plots import forest_plot
from bugfix_rl.recipes.starting_policy import build_starting_policy
from bugfix_rl.run.stopping import stop_reason
from bugfix_rl.run.trainer import Trainer


def ci(summary: dict, signed: bool = False) -> str:
    lo, hi = summary["ci"]
    fmt = "+.3f" if signed else ".3f"
    value = summary.get("pass_at_1", summary.get("diff"))
    return f"{value:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def capstone_section(run: Path) -> list[str]:
    result = json.loads((run / "eval.json").read_text())
    rows = [json.loads(line) for line in open(run / "metrics.jsonl")]
    cfg = result["config"]
    lines = ["## 1. Capstone (seed {seed}, {steps} steps x 64 episodes, {threads} threads)".format(**cfg), "",
             f"Run dir: `{run}`. Command: `bugfix-rl train +exp=capstone seed={cfg['seed']}`.", "",
             "| checkpoint step | validation pass@1 [95% CI over tasks, Wilson] | per task (of 16) |", "|---|---|---|"]
    for step, v in result["validation"].items():
        lines.append(f"| {step} | {ci(v)} | {v['per_task']} |")
    lines += ["", f"Chosen on validation (best pass@1, ties -> earliest): step {result['chosen_step']}.", "",
              "Test (5 tasks x 32 episodes, evaluated once per model):", "",
              "| model | pass@1 [95% CI] | pass@4 | pass@8 | per task (of 32) |", "|---|---|---|---|---|"]
    test = result["test"]
    for name in ("base", "chosen"):
        t = test[name]
        lines.append(f"| {name} | {ci(t)} | {t['pass_at_4']:.3f} | {t['pass_at_8']:.3f} | {t['per_task']} |")
    lines += ["", f"Paired difference chosen - base over the 5 test tasks: {ci(test['paired_diff'], signed=True)}"
              " (one training seed; the interval, the hull of the paired t and MOVER-Wilson intervals, is about"
              " new tasks, not new seeds).", "",
              "![capstone dashboard](img/capstone_dashboard.png)", "",
              "pass@k of base and chosen for k = 1..32 on the test tasks (design-review question 24; eval.json"
              " `test.<model>.pass_at_k_curve`): "
              + "; ".join(f"{name} " + " ".join(f"k={k} {test[name]['pass_at_k_curve'][k - 1]:.3f}"
                                                 for k in (1, 2, 4, 8, 16, 32)) for name in ("base", "chosen")), "",
              "![pass@k curves](img/capstone_pass_at_k.png)", ""]
    zero = [r["zero_adv_frac"] for r in rows]
    windows = [round(sum(zero[i:i + 10]) / len(zero[i:i + 10]), 2) for i in range(0, len(zero), 10)]
    val = {s: round(v["pass_at_1"], 3) for s, v in result["validation"].items()}
    lines += ["### Stop-rule signals", "",
              f"Zero-advantage fraction by 10-step window: {windows}.", "",
              f"Validation pass@1 by checkpoint: {val}.", ""]
    lines += stop_rules_applied(run, result, rows)
    return lines


def stop_rules_applied(run: Path, result: dict, rows: list[dict]) -> list[str]:
    """The book's exercise: apply `stop.*` rules to the recorded run, after the fact, and price them."""
    validation = {int(s): v for s, v in result["validation"].items()}
    cfg = TrainConfig()
    tokenizer = build_tokenizer_for(cfg)
    make_env, close = make_env_factory(cfg.env)
    lines = ["What `stop.*` would have done here (applied to the recorded run; the chosen checkpoint is then the"
             " best validation among those before the stop, tested on the same 5 tasks x 32 episodes):", "",
             "| rule | stops at step | steps saved | chosen | test pass@1 [95% CI] |", "|---|---|---|---|---|"]
    rules = {"patience=2 (no gain over the best for 2 checkpoints)": StopConfig(patience=2),
             "zero_adv_window=10, zero_adv_threshold=0.7": StopConfig(zero_adv_window=10, zero_adv_threshold=0.7),
             "none (the run as trained)": StopConfig()}
    steps = len(rows)
    for name, rule in rules.items():
        stopped = steps
        for step in range(1, steps + 1):
            seen = {s: v for s, v in validation.items() if s <= step}
            if step < steps and stop_reason(rule, seen, rows[:step], at_checkpoint=step in validation):
                stopped = step
                break
        seen = {s: v for s, v in validation.items() if s <= stopped}
        chosen = max(seen, key=lambda s: (seen[s]["pass_at_1"], -s))
        if chosen == result["chosen_step"]:
            test = result["test"]["chosen"]
        else:
            agent = build_policy(cfg.policy, tokenizer, init=str(run / "checkpoints" / f"step_{chosen:03d}.safetensors"))
            counts = success_counts(sample_trajectories(agent, tokenizer, make_tasks("test"), 32, make_env, 1.0,
                                                        cfg.eval.test_seed), 5)
            test = pass_rate_summary(counts, 32)
        lines.append(f"| {name} | {stopped if stopped < steps else '-'} | {steps - stopped} | step {chosen} | {ci(test)} |")
    close()
    return lines + [""]


def behaviour_section(run: Path, seed: int = 5, n: int = 32) -> list[str]:
    result = json.loads((run / "eval.json").read_text())
    cfg = TrainConfig()
    tokenizer = build_tokenizer_for(cfg)
    make_env, close = make_env_factory(cfg.env)
    chosen = run / "checkpoints" / f"step_{result['chosen_step']:03d}.safetensors"
    agent = build_policy(cfg.policy, tokenizer, init=str(chosen))
    tasks = make_tasks("heldout")
    trajectories = sample_trajectories(agent, tokenizer, tasks, n, make_env, 1.0, seed)
    close()
    stats = behaviour_stats(trajectories)
    counts = success_counts(trajectories, len(tasks))
    summary = pass_rate_summary(counts, n)
    lines = [f"## 2. What the chosen checkpoint does (step {result['chosen_step']}, 10 held-out tasks x {n} episodes,"
             f" generator seed {seed})", "",
             f"Held-out pass@1 {ci(summary)}.", "",
             " | ".join(f"{k} {stats[k]:.2f}" for k in ("pass_rate", "reads", "tests", "edits", "first_edit_right",
                                                         "exploit", "turns", "length")), "",
             "Most common action sequences:", "", "```"]
    lines += [f"{count:4d} x {seq}" for count, seq in action_sequences(trajectories, 6)]
    saturate = [t for t in trajectories if t.info.task == "minmax/saturate"]
    lines += ["```", "", "Most common sequences on `minmax/saturate`:", "", "```"]
    lines += [f"{count:4d} x {seq}" for count, seq in action_sequences(saturate, 3)]
    lines += ["```", "", "| task | pass | correct op | first edits |", "|---|---|---|---|"]
    confusions = []
    for row in per_task_table(trajectories):
        lines.append(f"| {row['task']} | {row['pass']:.2f} | {row['correct_op']} | {row['first_edits']} |")
        wrong = {op: c for op, c in row["first_edits"].items() if op != row["correct_op"]}
        if row["pass"] < 0.5 and wrong:
            op, c = max(wrong.items(), key=lambda kv: kv[1])
            what = "no edit at all" if op == "none" else f"`{op}`"
            confusions.append(f"`{row['task']}` gets {what} ({c} of {row['episodes']}) instead of `{row['correct_op']}`")
    lines += ["", "Confusions (held-out tasks below 0.5): " + ("; ".join(confusions) if confusions else "none") + ".", ""]
    make_env, close = make_env_factory(cfg.env)
    weak = failure_analysis(trajectories, tasks, n, tokenizer, make_env, oracle_for(cfg.env))
    close()
    lines += ["### Failure analysis of the weak tasks (§19.6)", "",
              "`bugfix-rl eval ckpt=<chosen checkpoint> split=heldout n=32 seed=5 explain=true` prints the same: each"
              " held-out task below 0.5, its failing episodes' first edits and endings against the oracle's keyword"
              " rule and episode, and two decoded failing episodes.", ""] + failure_lines(weak)
    return lines


def starts_section(n: int = 16, group_size: int = 8, seed: int = 1) -> list[str]:
    """The book's §19.2 comparison of starting policies: `bugfix-rl starts` with its defaults."""
    from bugfix_rl.commands.starts import starting_policy
    from bugfix_rl.evaluate.starts import profile_policy, profiles_markdown

    cfg = TrainConfig()
    tokenizer = build_tokenizer_for(cfg)
    make_env, close = make_env_factory(cfg.env)
    profiles = []
    for name in ("rl_base", "sft", "scratch"):
        model, losses = starting_policy(cfg, name, tokenizer, make_env)
        label = (f"SFT cold start ({cfg.cold_start.steps} steps on {cfg.cold_start.demos} oracle demos, loss"
                 f" {losses[0]:.3f} -> {losses[-1]:.3f})" if losses else f"{'RL base' if name == 'rl_base' else name}"
                 f" (policy.init={name})")
        profiles.append(profile_policy(label, model.eval(), tokenizer, make_env, 1.0, n, group_size, seed))
    close()
    return [f"## 5. Starting policies before RL (`bugfix-rl starts`; 20 training tasks, {n} episodes per task for"
            f" pass@k, one group of {group_size} per task; 95% Wilson intervals over tasks)", "",
            *profiles_markdown(profiles), "",
            "GRPO learns only from informative groups (rewards that differ), so successes among a start's samples"
            " and entropy left to explore are what RL can use. Here the cold start passes"
            f" {profiles[1].pass_at_1[0]:.2f} of training episodes against the RL base's {profiles[0].pass_at_1[0]:.2f},"
            f" with {profiles[1].informative_groups:.2f} of groups informative against {profiles[0].informative_groups:.2f}"
            f" and entropy {profiles[1].entropy:.2f} against {profiles[0].entropy:.2f} nats; scratch has"
            f" {profiles[2].informative_groups:.2f} informative groups, so RL gets no gradient from it. These numbers"
            " predict how learning starts, not where it ends: the ablation (section 3, arm sft) tests that.", ""]


def ablation_section(sweep: Path, seconds: float | None, command: str) -> list[str]:
    report = build_report(sweep, "default")
    Path("docs/img").mkdir(parents=True, exist_ok=True)
    forest_plot(forest_rows(report), "docs/img/ablation_forest.png",
                title="held-out pass@1 vs default (95% CI over seeds and tasks)")
    header = table_header(report)
    lines = [f"## 3. Ablation ({len(report.rows[0].seeds)} seeds per arm, 30 steps, {report.tasks} held-out tasks x"
             f" {report.episodes} episodes)",
             "", f"Sweep dir: `{sweep}`. Command: `{command}`.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in report.rows:
        lines.append("| " + " | ".join(table_cells(report, row)) + " |")
    lines += ["", "![forest plot](img/ablation_forest.png)", ""]
    lines += verdicts(report)
    lines.append("")
    if seconds is not None:
        lines += [f"Wall-clock for the whole sweep ({len(report.runs)} runs, 2 at a time with 1 thread each on 2 cores):"
                  f" {seconds:.0f} s.", ""]
    lines += ["### Power", "", "```"] + power_lines(report.power) + ["```", ""]
    return lines


def reproducibility_section(steps: int = 30) -> list[str]:
    """Train the default recipe from seed 0 with 1 and with 2 threads; where do the runs part?"""
    cfg = TrainConfig()
    tokenizer = build_tokenizer_for(cfg)
    make_env, close = make_env_factory(cfg.env)
    histories, models = {}, {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        base = build_starting_policy(cfg.policy, tokenizer)
        model = copy.deepcopy(base)
        torch.manual_seed(cfg.seed)
        trainer = Trainer(cfg, model, tokenizer, make_env, torch.Generator().manual_seed(cfg.seed))
        histories[threads] = [trainer.step(s) for s in range(steps)]
        models[threads] = model
    torch.set_num_threads(2)
    diverge = next((i for i in range(steps) if histories[1][i]["reward"] != histories[2][i]["reward"]), None)
    gap = max(float((p - q).abs().max()) for p, q in zip(models[1].parameters(), models[2].parameters()))
    held = {}
    for threads, model in models.items():
        counts = success_counts(sample_trajectories(model, tokenizer, make_tasks("heldout"), 16, make_env, 1.0, 100),
                                10)
        held[threads] = pass_rate_summary(counts, 16)
    close()
    return [f"## 4. Reproducibility: 1 thread vs 2 threads (seed 0, {steps} steps, same code and config)", "",
            f"First step whose batch reward differs: {diverge if diverge is not None else 'none within ' + str(steps)}."
            f" Largest parameter difference at step {steps}: {gap:.2e}.", "",
            f"Held-out pass@1 at step {steps} (10 tasks x 16, generator seed 100): 1 thread {ci(held[1])},"
            f" 2 threads {ci(held[2])}.", "",
            "Thread count changes the order of floating-point reductions, so the two runs are different draws"
            " once one sampled token crosses a probability boundary; compare recipes across seeds, never one"
            " curve across machines or thread counts.", ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capstone", type=Path, required=True)
    parser.add_argument("--ablation", type=Path, required=True)
    parser.add_argument("--ablation-seconds", type=float, default=None)
    parser.add_argument("--ablation-command", default="bugfix-rl train +exp=ablation "
                        "+ablation=default,kl,sft,public seed=0,1,2 -m")
    parser.add_argument("--out", type=Path, default=Path("docs/RESULTS.md"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    Path("docs/img").mkdir(parents=True, exist_ok=True)
    shutil.copy(args.capstone / "dashboard.png", "docs/img/capstone_dashboard.png")
    shutil.copy(args.capstone / "pass_at_k.png", "docs/img/capstone_pass_at_k.png")
    start = time.time()
    lines = ["# Results", "", "Generated by `scripts/make_results.py` (run `scripts/reproduce.sh` to regenerate from"
             " scratch). TinyAgent, 157k parameters, 20 training and 10 held-out tasks: mechanism demonstrations,"
             " not benchmark evidence. Intervals are 95%: Wilson over tasks for one policy, the t + MOVER hull for"
             " two policies on the same tasks, and a t-interval over seeds and tasks for two arms; docs/STATISTICS.md"
             " gives their coverage.", ""]
    lines += capstone_section(args.capstone)
    lines += behaviour_section(args.capstone)
    lines += ablation_section(args.ablation, args.ablation_seconds, args.ablation_command)
    lines += reproducibility_section()
    lines += starts_section()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # sections written by their own sweeps, carried over as they are: 6 (scripts/switches.sh) and 7 (the
    # copy-head switches, scripts/copy_switches.sh)
    kept = ""
    old = args.out.read_text() if args.out.is_file() else ""
    for block in ("switches", "copy-switches"):
        begin, end = f"<!-- {block}:begin -->", f"<!-- {block}:end -->"
        if begin in old:
            kept += "\n" + old[old.index(begin):old.index(end)] + end + "\n"
    args.out.write_text("\n".join(lines) + "\n" + kept)
    print(f"wrote {args.out} in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
