"""A policy evaluated on one split during a run: pass@1 with its interval, and decoded transcripts.

Validation at each kept checkpoint (run/lifecycle.py: the tasks of eval.val_splits pooled) and the final
evaluations (run/final_eval.py) call these; each split's episodes come from their own seeded stream.
"""

from __future__ import annotations

from pathlib import Path

import torch

from bugfix_rl.evaluate.episodes import transcript
from bugfix_rl.evaluate.evaluate import behaviour_stats, infra_failed, sample_trajectories, success_counts
from bugfix_rl.evaluate.intervals import task_mean_interval
from bugfix_rl.evaluate.stats import pass_rate_summary
from bugfix_rl.gym.tasks import make_tasks


def evaluate_split(model, tokenizer, make_env, split: str, n: int, seed: int, temperature: float,
                   episodes: list | None = None) -> dict:
    """pass@1 with its interval on a split; the sampled trajectories are appended to `episodes` if given."""
    return evaluate_tasks(model, tokenizer, make_env, make_tasks(split), n, seed, temperature, episodes)


def validation_tasks(splits: list[str]) -> list:
    """The tasks that validate a checkpoint (eval.val_splits): each split's tasks in turn, pooled."""
    return [task for split in splits for task in make_tasks(split)]


def validate_policy(model, tokenizer, make_env, eval_cfg, temperature: float) -> dict:
    """pass@1 with its interval on the validation tasks (eval.val_splits pooled, eval.n_val episodes
    each, the eval.val_seed stream): the score a kept checkpoint is chosen by; with two splits, also
    each one's (`by_split`)."""
    summary = evaluate_tasks(model, tokenizer, make_env, validation_tasks(eval_cfg.val_splits), eval_cfg.n_val,
                             eval_cfg.val_seed, temperature)
    if len(eval_cfg.val_splits) > 1:
        summary["by_split"] = split_rates(summary["per_task"], summary["n"], eval_cfg.val_splits)
    return summary


def split_rates(per_task: list[int], n: int, splits: list[str]) -> dict:
    """split -> {pass_at_1, ci (over its tasks), tasks}, from pooled per-task success counts of n episodes,
    the tasks in validation_tasks(splits)' order."""
    rates, start = {}, 0
    for split in splits:
        size = len(make_tasks(split))
        mean, lo, hi = task_mean_interval(torch.tensor(per_task[start:start + size], dtype=torch.float64) / n)
        rates[split] = {"pass_at_1": float(mean), "ci": [float(lo), float(hi)], "tasks": size}
        start += size
    return rates


def evaluate_tasks(model, tokenizer, make_env, tasks: list, n: int, seed: int, temperature: float,
                   episodes: list | None = None) -> dict:
    """evaluate_split on a list of tasks: pass@1 with its interval over them (n episodes each)."""
    trajectories = sample_trajectories(model, tokenizer, tasks, n, make_env, temperature, seed)
    if episodes is not None:
        episodes.extend(trajectories)
    summary = pass_rate_summary(success_counts(trajectories, len(tasks)), n)
    summary["tasks_names"] = [t.name for t in tasks]
    summary["infra_failed"] = infra_failed(trajectories)  # counted as failures above
    return summary


def evaluate_with_transcripts(model, tokenizer, make_env, split: str, n: int, seed: int, temperature: float,
                              transcript_path: Path, episodes: list | None = None) -> dict:
    """evaluate_split plus per-episode behaviour means (`behaviour`: the tool table's numbers) and one
    decoded transcript per task (its first episode) written to `transcript_path`."""
    trajectories: list = []
    summary = evaluate_split(model, tokenizer, make_env, split, n, seed, temperature, trajectories)
    if episodes is not None:
        episodes.extend(trajectories)
    summary["behaviour"] = behaviour_stats(trajectories)
    save_transcripts(transcript_path, make_tasks(split), trajectories, n, tokenizer)
    return summary


def save_transcripts(path: Path, tasks, trajectories, n: int, tokenizer) -> None:
    """One decoded episode per task (the first of its n, task-contiguous trajectories) written to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(transcript(task.name, trajectories[i * n], tokenizer) for i, task in enumerate(tasks)))


def save_training_transcripts(path: Path, policy, tokenizer, make_env, temperature: float, seed: int) -> None:
    """The book's capture: one episode of `policy` per training task, decoded into `path`."""
    train_tasks = make_tasks("train")
    save_transcripts(path, train_tasks, sample_trajectories(policy, tokenizer, train_tasks, 1, make_env, temperature,
                                                            seed), 1, tokenizer)
