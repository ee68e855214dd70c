"""The end of a run: choose the checkpoint on validation, evaluate the base and the chosen policy once
on test (and on the held-out, `shapes` and `shapes_val` tasks), and write eval.json and the reports.

eval.json's keys, in order: chosen_step, stop, validation, config, run, replay, train, then test and
each of heldout / shapes / shapes_val with its base run and paired difference, then shapes_gain_kept.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from bugfix_rl.evaluate.stats import gain_kept, paired_summary, paired_summary_over_templates, pass_at_k_curve
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.policy.build import build_policy
from bugfix_rl.present.dashboard import plot_dashboard
from bugfix_rl.present.plots import plot_pass_at_k
from bugfix_rl.present.viewer import pick_episodes, write_run_page
from bugfix_rl.progress import PhaseProgress
from bugfix_rl.rollout.replay import replay_caveats
from bugfix_rl.run.evaluations import evaluate_split, evaluate_with_transcripts
from bugfix_rl.run.lifecycle import RunState


@dataclass
class BaseAndChosen:
    """The run's starting policy and the checkpoint chosen on validation, evaluated alike."""

    base: torch.nn.Module
    chosen: torch.nn.Module
    chosen_step: int
    tokenizer: object
    make_env: Callable
    temperature: float


def finish_run(cfg, run_dir: Path, state: RunState, base, tokenizer, make_env,
               progress: PhaseProgress | None = None, loggers=()) -> dict:  # loggers: each gets logger.final(...)
    """Choose the checkpoint on validation, evaluate base and chosen on test once (and on the
    held-out, `shapes` and `shapes_val` tasks), write the reports. `progress` shows the evaluations."""
    from bugfix_rl.present.report_run import write_summary

    progress = progress or PhaseProgress(bars=False, lines=False)
    evaluations = []
    if cfg.eval.test:
        evaluations.append(f"test (base and chosen, {len(make_tasks('test'))} tasks x {cfg.eval.n_test})")
    evaluations += [f"{label} (base and chosen, {len(make_tasks(split))} tasks x {n})"
                    for split, n, _, label in split_evaluations(cfg) if n > 0]
    if evaluations:
        with progress.phase("final evaluation: " + ", ".join(evaluations), done="final evaluation done"), \
                progress.stage("policies evaluated", 2 * len(evaluations)) as advance:
            result, episodes = final_evaluations(cfg, run_dir, state, base, tokenizer, make_env, advance)
    else:
        result, episodes = final_evaluations(cfg, run_dir, state, base, tokenizer, make_env, lambda status="": None)
    (run_dir / "eval.json").write_text(json.dumps(result, indent=1))
    for caveat in result["replay"]["caveats"]:  # one line each, also without logger.console
        print(f"warning: {caveat}", file=sys.stderr)
    plot_dashboard(state.rows, run_dir / "dashboard.png", title=f"{cfg.experiment} / {cfg.arm} / seed {cfg.seed}",
                   validation=state.validation)
    write_summary(run_dir, result, state.rows)
    write_run_page(run_dir, result, episodes, tokenizer)
    for logger in loggers:
        logger.final(result, episodes, tokenizer)
    return result


def final_evaluations(cfg, run_dir: Path, state: RunState, base, tokenizer, make_env, advance) -> tuple[dict, dict]:
    """finish_run's result dict, and the viewer's episodes (label -> viewer.pick_episodes output) of the
    test evaluation (else the held-out one, else the shapes one, else shapes_val); advance(name) after each
    policy evaluated."""
    episodes: dict[str, list] = {}
    chosen_step = chosen_checkpoint(state.validation)
    chosen = build_policy(cfg.policy, tokenizer, init=str(state.checkpoints[chosen_step]))
    pair = BaseAndChosen(base, chosen, chosen_step, tokenizer, make_env, cfg.algo.temperature)
    result = run_summary(cfg, state, base, chosen_step)
    if cfg.eval.test:
        result["test"] = test_evaluation(pair, cfg.eval, run_dir, episodes, advance)
    for split, n, seed, label in split_evaluations(cfg):  # each its own seeded stream, after the test's
        if n > 0:
            result.update(split_evaluation(pair, split, n, seed, label, run_dir, episodes, advance))
    if "heldout" in result and "shapes" in result:
        result["shapes_gain_kept"] = gain_kept(result["heldout_paired_diff"], result["shapes_paired_diff"])
    return result, episodes


def split_evaluations(cfg) -> tuple[tuple[str, int, int, str], ...]:
    """(split, episodes per task, generator seed, label) of each start-vs-chosen evaluation after the test's
    (n = 0: not run): held-out, `shapes` and `shapes_val`."""
    return (("heldout", cfg.eval.heldout_n, cfg.eval.heldout_seed_offset + cfg.seed, "held-out"),
            ("shapes", cfg.eval.shapes_n, cfg.eval.shapes_seed_offset + cfg.seed, "shapes"),
            ("shapes_val", cfg.eval.shapes_val_n, cfg.eval.shapes_seed_offset + cfg.seed, "shapes_val"))


def chosen_checkpoint(validation: dict[int, dict]) -> int:
    """The step with the best validation pass@1; ties -> the earliest."""
    val_score = {s: v["pass_at_1"] for s, v in validation.items()}
    return max(val_score, key=lambda s: (val_score[s], -s))


def run_summary(cfg, state: RunState, base, chosen_step: int) -> dict:
    """eval.json's keys before the evaluations: the choice, the stop rule, validation, the config and
    versions, the run record, the replay caveats and the training summary."""
    stopped = state.stopped or {"step": None, "reason": None}
    return {
        "chosen_step": chosen_step,
        "stop": {"rule": dataclasses.asdict(cfg.stop), "stopped_at": stopped["step"], "reason": stopped["reason"],
                 "steps_saved": cfg.steps - stopped["step"] if state.stopped else 0},
        "validation": {str(s): v for s, v in state.validation.items()},
        "config": {"seed": cfg.seed, "threads": cfg.threads, "arm": cfg.arm, "experiment": cfg.experiment,
                   "steps": cfg.steps, "versions": library_versions(),
                   "resolved": dataclasses.asdict(cfg)},
        "run": run_record(cfg.env, state),
        # why a rerun or resume might not end at these bytes ([]: nothing known; docs/REPRODUCIBILITY.md)
        "replay": {"caveats": replay_caveats(next(base.parameters()).is_cuda, state.rows)},
        "train": train_summary(state.rows),
    }


def train_summary(rows: list[dict]) -> dict:
    return {"late_reward": _late_mean(rows, "reward"), "final_entropy": rows[-1].get("entropy"),
            "final_exploit": rows[-1].get("exploit"), "late_exploit": _late_mean(rows, "exploit"),
            "late_canary_reward": _late_mean(rows, "canary_reward"),  # None without canaries
            "sampled_episodes": sum(r["sampled_episodes"] for r in rows),
            "collapse_alarm_steps": [r["step"] for r in rows if r.get("collapse_alarm")],
            "malformed_alarm_steps": [r["step"] for r in rows if r.get("malformed_alarm")],
            "kl_mu_prox_alarm_steps": [r["step"] for r in rows if r.get("kl_mu_prox_alarm")],
            "seconds_per_step": sum(r["time_sample"] + r["time_update"] for r in rows) / len(rows)}


def test_evaluation(pair: BaseAndChosen, eval_cfg, run_dir: Path, episodes: dict, advance) -> dict:
    """Base and chosen on the test split (eval.n_test episodes per task, one stream), paired over tasks,
    with pass@k curves (pass_at_k.png); the viewer gets both policies' episodes."""
    test, n = {}, eval_cfg.n_test
    for name, policy in (("base", pair.base), ("chosen", pair.chosen)):
        sampled: list = []
        test[name] = evaluate_split(policy, pair.tokenizer, pair.make_env, "test", n, eval_cfg.test_seed,
                                    pair.temperature, sampled)
        episodes[f"test, {name} ({'RL base' if name == 'base' else 'step ' + str(pair.chosen_step)})"] = pick_episodes(
            sampled, test[name]["tasks_names"], n)
        advance(f"test {name}")
    test["paired_diff"] = paired_summary(test["chosen"]["per_task"], test["base"]["per_task"], n)
    for name in ("base", "chosen"):
        test[name]["pass_at_k_curve"] = pass_at_k_curve(n, torch.tensor(test[name]["per_task"]))
    plot_pass_at_k({name: test[name]["pass_at_k_curve"] for name in ("base", "chosen")},
                   run_dir / "pass_at_k.png", title=f"test pass@k, {len(test['base']['per_task'])} tasks x {n}")
    return test


def split_evaluation(pair: BaseAndChosen, split: str, n: int, seed: int, label: str, run_dir: Path,
                     episodes: dict, advance) -> dict:
    """The chosen checkpoint, then the run's starting policy, on the same tasks and stream of `split`
    (heldout, shapes or shapes_val): {split, split_base, split_paired_diff}, before vs after paired over tasks
    (and, for generated tasks, under "over_templates" over their templates), with transcripts; the
    viewer gets these episodes when there was no test evaluation before."""
    chosen_sampled, base_sampled = [], []
    chosen = evaluate_with_transcripts(pair.chosen, pair.tokenizer, pair.make_env, split, n, seed, pair.temperature,
                                       run_dir / "transcripts" / f"{split}_chosen.txt", chosen_sampled)
    advance(f"{label} chosen")
    base = evaluate_with_transcripts(pair.base, pair.tokenizer, pair.make_env, split, n, seed, pair.temperature,
                                     run_dir / "transcripts" / f"{split}_base.txt", base_sampled)
    advance(f"{label} base")
    paired_diff = paired_summary(chosen["per_task"], base["per_task"], n)
    # generated tasks (several per template: shapes, shapes_val): the interval over templates too
    over = paired_summary_over_templates(chosen["per_task"], base["per_task"], n, chosen["tasks_names"])
    if over is not None:
        paired_diff["over_templates"] = over
    if not episodes:  # the viewer shows the test episodes when there are any, else held-out, shapes, shapes_val
        names = chosen["tasks_names"]
        episodes[f"{label}, RL base"] = pick_episodes(base_sampled, names, n)
        episodes[f"{label}, chosen (step {pair.chosen_step})"] = pick_episodes(chosen_sampled, names, n)
    return {split: chosen, f"{split}_base": base, f"{split}_paired_diff": paired_diff}


def library_versions() -> dict:
    import hydra

    from bugfix_rl import kernels

    return {"python": platform.python_version(), "torch": torch.__version__, "hydra": hydra.__version__,
            "kernels": kernels.kernel_signature(), "cpu": kernels.cpu_model(),
            "mkl_vendor_check": kernels.mkl_vendor_check or "not needed"}


def run_record(env_cfg, state: RunState) -> dict:
    """What the book's lab scripts saved beside the scores: the env's tool schema and resource limits,
    the wall clock of this process, and the peak device memory (None without a CUDA device)."""
    from bugfix_rl.gym.chat import EDIT_MENU_TOOLS
    from bugfix_rl.gym.tools.calls import TOOL_SCHEMAS

    peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
    return {"tool_schema": TOOL_SCHEMAS if env_cfg.name == "tools" else EDIT_MENU_TOOLS,
            "resource_limits": dataclasses.asdict(env_cfg.sandbox) if env_cfg.name == "tools" else None,
            "wall_seconds": time.perf_counter() - state.started, "peak_device_memory_mb": peak}


def _late_mean(rows: list[dict], key: str, window: int = 5) -> float | None:
    values = [r[key] for r in rows[-window:] if r.get(key) is not None]
    return sum(values) / len(values) if values else None
