"""A run's TensorBoard record (`logger=tensorboard`, or `logger.tensorboard=true` beside W&B):
`<run dir>/tensorboard/`, read with `tensorboard --logdir <run dir>` (or a sweep dir: one run per folder).

The same numbers W&B gets (wandb_run.py): every numeric key of each dashboard row at its step (the
names of metrics.jsonl: `reward`, `entropy`, ...), then the final evaluation at the last step, with the
summary keys W&B's run summary has (`test/chosen/pass_at_1`, `test/chosen/ci_low`, `heldout/final/...`,
`test/paired_diff`, ...), and each checkpoint's validation pass@1 with its interval at its own step
(`validation/pass_at_1`, `validation/ci_low`, `validation/ci_high`).

torch.utils.tensorboard needs the `tensorboard` package; inputs.check_inputs says so in one line
before a run starts when it is missing (`available`).
"""

from __future__ import annotations

from pathlib import Path

from bugfix_rl.present.wandb_run import final_metrics

FOLDER = "tensorboard"  # under the run dir


def available() -> bool:
    """Whether the `tensorboard` package can be imported (torch.utils.tensorboard writes through it),
    found without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec("tensorboard") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules holds None for it (import blocked)
        return False


class TensorBoardLogger:
    """Writes the dashboard rows, then (final) the final evaluation, as scalars; close() flushes."""

    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter  # imported only when selected (~1.5 s)

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / FOLDER))
        self.last_step = 0

    def log(self, row: dict) -> None:
        self.last_step = row["step"]
        for key, value in row.items():
            if isinstance(value, (int, float)) and key != "step":  # what W&B gets (bools as 0/1)
                self.writer.add_scalar(key, float(value), global_step=row["step"])

    def final(self, result: dict, episodes=None, tokenizer=None) -> None:
        """eval.json's numbers: each checkpoint's validation at its step, the final evaluation (W&B's
        summary keys) at the last step."""
        for step, summary in sorted(result.get("validation", {}).items(), key=lambda item: int(item[0])):
            self.writer.add_scalar("validation/pass_at_1", summary["pass_at_1"], global_step=int(step))
            if summary.get("ci"):
                self.writer.add_scalar("validation/ci_low", summary["ci"][0], global_step=int(step))
                self.writer.add_scalar("validation/ci_high", summary["ci"][1], global_step=int(step))
        for key, value in final_metrics(result).items():
            self.writer.add_scalar(key, value, global_step=self.last_step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
