"""summary.md of one run: the config line, checkpoint table, test report, and the dashboard figure."""

from __future__ import annotations

from pathlib import Path


def _rate(summary: dict) -> str:
    lo, hi = summary["ci"]
    return f"{summary['pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}]"


def write_summary(run_dir: Path, result: dict, rows: list[dict]) -> Path:
    cfg = result["config"]
    lines = [f"# {cfg['experiment']} / arm {cfg['arm']} / seed {cfg['seed']}", "",
             f"{cfg['steps']} steps, {cfg['threads']} threads, torch {cfg['versions']['torch']};"
             f" {result['train']['seconds_per_step']:.3f} s per step (sampling + update).", "",
             "![dashboard](dashboard.png)", "", "## Validation (checkpoint selection)", "",
             "| step | pass@1 [95% task-bootstrap CI] | per task |", "|---|---|---|"]
    for step, v in result["validation"].items():
        lines.append(f"| {step} | {_rate(v)} | {v['per_task']} (of {v['n']}) |")
    lines += ["", f"Chosen checkpoint: step {result['chosen_step']} (best validation pass@1, ties -> earliest).", ""]
    test = result.get("test")
    if test:
        n_tasks = test["paired_diff"]["tasks"]
        lines += ["## Test (evaluated once per reported model)", "",
                  "| model | pass@1 [95% CI] | pass@4 | pass@8 | per task |", "|---|---|---|---|---|"]
        for name in ("base", "chosen"):
            t = test[name]
            lines.append(f"| {name} | {_rate(t)} | {t.get('pass_at_4', float('nan')):.3f} |"
                         f" {t.get('pass_at_8', float('nan')):.3f} | {t['per_task']} (of {t['n']}) |")
        d = test["paired_diff"]
        lines += ["", f"chosen - base, paired over {n_tasks} test tasks: {d['diff']:+.3f}"
                  f" [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] (one seed; the interval resamples tasks, not seeds)."]
    if "heldout" in result:
        lines += ["", f"Held-out (all 10 tasks, final policy): pass@1 {_rate(result['heldout'])}"
                  f" per task {result['heldout']['per_task']} (of {result['heldout']['n']})."]
    train = result["train"]
    lines += ["", f"Late training reward (last 5 steps): {train['late_reward']:.3f}; exploit use at the end:"
              f" {train['late_exploit']:.2f}; final entropy {train['final_entropy']:.3f} nats;"
              f" episodes sampled: {train['sampled_episodes']}."]
    path = Path(run_dir) / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return path
