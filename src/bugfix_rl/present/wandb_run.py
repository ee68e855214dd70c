"""A run's W&B record (`logger=wandb`; offline by default, `wandb sync <run dir>/wandb/offline-run-*`
uploads it later): the dashboard rows, then the final evaluation.

The W&B run stays open through the final evaluation, so its summary holds what eval.json holds
(`test/chosen/pass_at_1`, its interval, the paired difference, held-out and shapes), and a table of
the decoded episodes the run page shows is logged at the last step. The run is named
`<experiment>-<arm>-seed<seed>`, grouped by its sweep (`<experiment>/<sweep dir>` for a run dir laid
out as conf/train.yaml's sweep subdir, `<arm>_seed<seed>_<n>`) or else by its experiment, and tagged
with its arm, seed, env and algorithm, so W&B's filters find what `report` compares.
"""

from __future__ import annotations

from pathlib import Path

SCORES = ("pass_at_1", "pass_at_4", "pass_at_8", "pass_hat_k", "flip_rate", "noise_floor")


def run_identity(config: dict, run_dir: Path) -> dict:
    """wandb.init's name, group and tags for a run of `config` (TrainConfig as a dict) in `run_dir`."""
    experiment, arm, seed = config["experiment"], config["arm"], config["seed"]
    in_sweep = Path(run_dir).name.startswith(f"{arm.replace('/', '_')}_seed{seed}_")
    return {"name": f"{experiment}-{arm}-seed{seed}",
            "group": f"{experiment}/{Path(run_dir).parent.name}" if in_sweep else experiment,
            "tags": [f"arm={arm}", f"seed={seed}", f"env={config['env']['name']}", f"algo={config['algo']['name']}"]}


def final_metrics(result: dict) -> dict[str, float]:
    """eval.json's numbers as flat W&B summary keys: `test/chosen/pass_at_1`, `test/chosen/ci_low`,
    `test/paired_diff`, `heldout/pass_at_1`, ... (None and non-numbers left out)."""
    out: dict[str, float] = {"chosen_step": result["chosen_step"]}

    def scores(prefix: str, summary: dict) -> None:
        for key in SCORES:
            if isinstance(summary.get(key), (int, float)):
                out[f"{prefix}/{key}"] = summary[key]
        if summary.get("ci"):
            out[f"{prefix}/ci_low"], out[f"{prefix}/ci_high"] = summary["ci"]

    def difference(prefix: str, diff: dict) -> None:
        out[prefix] = diff["diff"]
        out[f"{prefix}_ci_low"], out[f"{prefix}_ci_high"] = diff["ci"]
        if diff.get("over_templates"):  # a generated split's gain over its templates (stats)
            difference(f"{prefix}_over_templates", diff["over_templates"])

    for name in ("base", "chosen"):
        if "test" in result:
            scores(f"test/{name}", result["test"][name])
    if "test" in result:
        difference("test/paired_diff", result["test"]["paired_diff"])
    for split in ("heldout", "shapes", "shapes_val"):
        if split in result:
            scores(f"{split}/final", result[split])
            scores(f"{split}/base", result[f"{split}_base"])
            difference(f"{split}/paired_diff", result[f"{split}_paired_diff"])
    return out


class WandbLogger:
    """Sends the dashboard rows to W&B, then (final) the final evaluation; close() ends the W&B run."""

    def __init__(self, cfg, run_dir: Path, config: dict):
        import wandb  # imported only when selected: it costs ~0.8 s at start-up

        # reinit="finish_previous": a sweep's runs in one process (Hydra's basic launcher) each get their
        # own W&B run, one after the other (reinit=True is deprecated)
        self.run = wandb.init(project=cfg.wandb_project, mode=cfg.wandb_mode, dir=str(run_dir), config=config,
                              reinit="finish_previous", **run_identity(config, run_dir))
        self.last_step = 0

    def log(self, row: dict) -> None:
        self.last_step = row["step"]
        self.run.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=row["step"])

    def final(self, result: dict, episodes: dict[str, list], tokenizer) -> None:
        """The final evaluation (eval.json's numbers) into the run's summary, and the decoded episodes the
        run page shows (`episodes`: label -> viewer.pick_episodes output) as a table at the last step."""
        import wandb

        from bugfix_rl.evaluate.episodes import transcript

        self.run.summary.update(final_metrics(result))
        table = wandb.Table(columns=["evaluation", "task", "success", "reward", "advantage", "transcript"])
        for label, picked in episodes.items():
            for task, trajectory, advantage in picked:
                table.add_data(label, task, bool(trajectory.info.success), float(trajectory.reward), float(advantage),
                               transcript(task, trajectory, tokenizer))
        self.run.log({"episodes": table}, step=self.last_step)

    def close(self) -> None:
        self.run.finish()
