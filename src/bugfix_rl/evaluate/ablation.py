"""`bugfix-rl report`'s numbers: the ablation rows of a sweep, each arm against the reference, and the
power calculation (present/ablation_report.py writes them as the table, report.md and forest plot).

Runs are found by their eval.json anywhere under the sweep dir (Hydra's -m layout
<sweep>/<arm>_seed<seed>_<num>/eval.json, or any other nesting) and grouped by the arm and seed
recorded in them. Each run's score is its held-out pass@1 when the run evaluated the held-out tasks
(eval.heldout_n > 0) and the chosen checkpoint's test pass@1 otherwise; one report uses one source
for all runs, so every arm is measured on the same tasks. When every run also evaluated the `shapes`
tasks (eval.shapes_n > 0: function shapes held out from training), a second table compares the arms
on those the same way, and another on the `shapes_val` tasks when every run evaluated them
(eval.shapes_val_n > 0: other held-out shapes, for choosing a recipe without reading `shapes`); the
primary source, its verdicts and the power calculation are unchanged. Runs whose new-shape evaluations
cannot be paired (other tasks or episode counts) get a note instead of that table.

An arm is compared with the reference arm by intervals.arm_difference: a t-interval whose variance
holds both the seed-to-seed spread of each arm's mean and the task-to-task spread of the per-task
differences (the book's §19.5 bootstrapped tasks only, after averaging seeds, and so left the seed
variance out: 3-4x too narrow on our sweeps). Beside each interval is its minimum detectable effect
(80% power); an arm is called better or worse only when its interval excludes 0. An arm with one
seed has no seed variance to measure: it is compared over tasks only, and the table says so.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bugfix_rl.evaluate.coverage_regimes import arms_design_warning
from bugfix_rl.evaluate.intervals import arm_difference, paired_task_interval
from bugfix_rl.evaluate.power import minimum_detectable_effect, seeds_needed, units_needed, variance_components
from bugfix_rl.evaluate.reliability import Z_95, flip_rate, run_noise_floor
from bugfix_rl.evaluate.stats import several_per_template, template_means

EFFECTS = (0.10, 0.05, 0.02)
FLOOR = 0.05  # arms with mean pass@1 outside [FLOOR, 1 - FLOOR] are left out of the variance estimates
TRAIN_KEYS = ("late_reward", "late_exploit", "final_entropy", "sampled_episodes", "seconds_per_step")
SHAPE_SPLITS = {"shapes": "eval.shapes_n", "shapes_val": "eval.shapes_val_n"}  # split -> the key that evaluates it


class ReportError(ValueError):
    """The sweep dir cannot be reported on (no runs, mixed tasks, unknown reference); one line."""


@dataclass
class Run:
    """One finished run: where it is, its arm and seed, per-task pass rates [T], training summary."""

    path: Path
    arm: str
    seed: int
    rates: dict[str, torch.Tensor]  # source ('heldout' | 'test' | 'shapes' | 'shapes_val') -> [T] per-task pass@1
    tasks: dict[str, list[str]]  # source -> task names
    episodes: dict[str, int]  # source -> episodes per task
    train: dict = field(default_factory=dict)


def _scores(result: dict) -> dict[str, dict]:
    sources = {}
    if "heldout" in result:
        sources["heldout"] = result["heldout"]
    if "test" in result:
        sources["test"] = result["test"]["chosen"]
    for split in SHAPE_SPLITS:
        if split in result:
            sources[split] = result[split]
    return sources


def read_run(path: Path) -> Run:
    """A Run from one eval.json (ReportError naming the file if it is not one)."""
    try:
        result = json.loads(path.read_text())
        config = result["config"]
        scores = _scores(result)
        return Run(path.parent, str(config["arm"]), int(config["seed"]),
                   {k: torch.tensor(v["per_task"], dtype=torch.float64) / v["n"] for k, v in scores.items()},
                   {k: list(v.get("tasks_names") or range(len(v["per_task"]))) for k, v in scores.items()},
                   {k: int(v["n"]) for k, v in scores.items()}, dict(result.get("train") or {}))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ReportError(f"cannot read run result {path}: {type(err).__name__}: {err}") from None


def find_runs(root: str | Path) -> list[Run]:
    """Every run under `root` (recursively, by eval.json); ReportError if there are none."""
    root = Path(root)
    if not root.is_dir():
        raise ReportError(f"no runs under {root} (no such directory)")
    runs = [read_run(p) for p in sorted(root.rglob("eval.json"))]
    if not runs:
        raise ReportError(f"no runs under {root} (looked for <run>/eval.json; is the sweep finished?)")
    return runs


def choose_source(runs: list[Run]) -> str:
    """'heldout' if every run has it, else 'test' if every run has that; the same tasks everywhere."""
    for source in ("heldout", "test"):
        if all(source in r.rates for r in runs):
            check_comparable(runs, source)
            return source
    raise ReportError("some runs have neither a held-out nor a test evaluation (eval.test=false and heldout_n=0)")


def check_comparable(runs: list[Run], source: str) -> None:
    """ReportError unless every run saw the same `source` tasks with the same episode count."""
    names = {tuple(map(str, r.tasks[source])) for r in runs}
    if len(names) > 1:
        raise ReportError(f"runs were evaluated on different {source} tasks; cannot pair them")
    episodes = sorted({r.episodes[source] for r in runs})
    if len(episodes) > 1:  # the variance parts and the MDE assume one episode count
        raise ReportError(f"runs were evaluated with different episode counts on the {source} tasks"
                          f" ({', '.join(map(str, episodes))}); report runs of one evaluation setting")


@dataclass
class ArmRow:
    """One arm of the ablation table."""

    arm: str
    seeds: list[int]
    per_seed: list[float]  # pass@1 of each seed's run
    mean: float
    diff: tuple[float, float, float] | None  # (mean diff vs reference, lo, hi); None for the reference
    train: dict[str, float | None]  # TRAIN_KEYS, averaged over seeds
    task_rates: torch.Tensor  # [S, T]
    mde: float | None = None  # minimum detectable effect of the comparison (80% power); None: tasks only
    seed_aware: bool = True  # False: one of the two arms has a single seed, the interval is over tasks only
    # the same comparison with each template's tasks averaged into one unit (a generated split's table, not
    # the reference's row): tasks of one template move together, so for new shapes this is the one to read
    diff_over_templates: tuple[float, float, float] | None = None  # (seed-aware as `seed_aware` says)


def _mean_of(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def group_runs(runs: list[Run], source: str) -> tuple[dict[str, dict[int, Run]], list[str]]:
    """arm -> seed -> Run; a repeated (arm, seed) keeps the newest run and is listed in the notes."""
    arms: dict[str, dict[int, Run]] = {}
    notes = []
    for run in sorted(runs, key=lambda r: (r.path / "eval.json").stat().st_mtime):
        if run.seed in arms.setdefault(run.arm, {}):
            notes.append(f"arm {run.arm} seed {run.seed} appears twice; using {run.path}")
        arms[run.arm][run.seed] = run
    return arms, notes


def choose_reference(arms, reference: str) -> str:
    """`reference` as given; "" (not given): the arm `default` if there is one, else the first arm by
    name (a sweep over a plain key has arms such as `env.reward=hidden`, `env.reward=mixed`)."""
    if reference:
        return reference
    return "default" if "default" in arms else sorted(arms)[0]


def ablation_rows(arms: dict[str, dict[int, Run]], source: str, reference: str) -> list[ArmRow]:
    """The reference arm first, then the others by name; each with its paired difference."""
    if reference not in arms:
        raise ReportError(f"reference arm {reference!r} not among the runs' arms: {', '.join(sorted(arms))}"
                          " (pass reference=<arm>)")
    order = [reference] + sorted(a for a in arms if a != reference)
    rates = {arm: torch.stack([arms[arm][s].rates[source] for s in sorted(arms[arm])]) for arm in order}  # [S, T]
    names = [str(name) for name in next(iter(arms[reference].values())).tasks[source]]
    templates = several_per_template(names)  # generated tasks (shapes, shapes_val); the book's are one per name
    rows = []
    for arm in order:
        seeds = sorted(arms[arm])
        per_seed = rates[arm].mean(1).tolist()
        train = {k: _mean_of([arms[arm][s].train.get(k) for s in seeds]) for k in TRAIN_KEYS}
        row = ArmRow(arm, seeds, per_seed, sum(per_seed) / len(per_seed), None, train, rates[arm])
        if arm != reference:
            row.diff, row.mde, row.seed_aware = compare_arms(rates[arm], rates[reference])
            if templates:
                row.diff_over_templates = compare_arms(template_means(rates[arm], names),
                                                       template_means(rates[reference], names))[0]
        rows.append(row)
    return rows


def compare_arms(a: torch.Tensor, b: torch.Tensor) -> tuple[tuple[float, float, float], float | None, bool]:
    """((diff, lo, hi), MDE, seed_aware) of arm a - arm b from their [S, T] rates."""
    if min(a.shape[0], b.shape[0]) >= 2 and a.shape[1] >= 2:
        result = arm_difference(a, b)
        mde = minimum_detectable_effect(float(result.se), float(result.df))
        return (float(result.diff), float(result.lo), float(result.hi)), mde, True
    diff, lo, hi = paired_task_interval(a.mean(0), b.mean(0))
    return (float(diff), float(lo), float(hi)), None, False


def power_analysis(rows: list[ArmRow], effects=EFFECTS, episodes: int | None = None) -> dict:
    """Seeds per arm and paired tasks needed to detect each effect (alpha 0.05, power 0.8).

    seed_sd: the seed-to-seed sd of an arm's mean pass@1, averaged over arms with >= 2 seeds (the
    book's convention); task_diff_sd: the sd over tasks of the seed-averaged per-task differences
    between the reference and the arm closest to it (a near-null comparison, as in the book). Each
    is turned into units by a t-test (noncentral t) and, for comparison with the book, a z-test. A
    zero or unmeasurable sd leaves its column empty (None) rather than claiming one unit suffices.
    With `episodes`, "design" also gives the seeds per arm that the interval `report` prints needs
    at this sweep's tasks and episodes (power.seeds_needed, from the sweep's variance components).
    """
    # an arm pinned at the floor or ceiling (the public-reward arm at 0.00) has no room to vary:
    # its near-zero spread would make every design look cheap, so it is left out, as in the book
    pinned = [r.arm for r in rows[1:] if not FLOOR < r.mean < 1 - FLOOR]
    rows = [r for r in rows if r.arm not in pinned]
    sds = [torch.tensor(r.per_seed, dtype=torch.float64).std().item() for r in rows if len(r.seeds) >= 2]
    seed_sd = sum(sds) / len(sds) if sds else None
    others = [r for r in rows[1:] if r.diff is not None]
    task_diff_sd, closest = None, None
    if others:
        closest = min(others, key=lambda r: abs(r.diff[0]))
        diffs = closest.task_rates.mean(0) - rows[0].task_rates.mean(0)  # [T]
        task_diff_sd = diffs.std().item() if diffs.numel() >= 2 else None
    parts = None
    if episodes and any(len(r.seeds) >= 2 for r in rows):
        parts = variance_components({r.arm: r.task_rates for r in rows}, rows[0].arm, episodes)
    num_tasks = int(rows[0].task_rates.shape[1])
    table = []
    for effect in effects:
        table.append({
            "effect": effect,
            "seeds_per_arm": units_needed(seed_sd, effect, two_arms=True) if seed_sd else None,
            "paired_tasks": units_needed(task_diff_sd, effect, two_arms=False) if task_diff_sd else None,
            "seeds_per_arm_z": units_needed(seed_sd, effect, two_arms=True, test="z") if seed_sd else None,
            "paired_tasks_z": units_needed(task_diff_sd, effect, two_arms=False, test="z") if task_diff_sd else None,
            "design_seeds": (seeds_needed(parts, num_tasks, episodes, effect)
                             if parts is not None and num_tasks >= 2 else None),
        })
    return {"seed_sd": seed_sd, "task_diff_sd": task_diff_sd, "task_diff_arm": closest.arm if closest else None,
            "components": dataclasses.asdict(parts) if parts else None, "left_out": pinned, "tasks": num_tasks, "episodes": episodes,
            "table": table, "noise_floor": noise_floor(rows, seed_sd, episodes)}


def noise_floor(rows: list[ArmRow], seed_sd: float | None, episodes: int | None) -> dict:
    """The smallest pass@1 difference this design can show (reliability.py), 95%: `runs`, between two
    training runs of one arm (1.96 sqrt(2) seed_sd; None without an arm of >= 2 seeds), and `evaluations`,
    between two evaluations of one checkpoint (episode noise alone, from the mean unbiased flip rate of
    every run's tasks; None at one episode per task; `runs` is never below it). A single-run difference
    below `runs` is noise."""
    evaluations, mean_flip = None, None
    if episodes and episodes >= 2:
        counts = torch.cat([r.task_rates for r in rows]).mul(episodes).round()  # [runs, T]
        mean_flip = float(flip_rate(episodes, counts.reshape(-1)).mean())
        evaluations = Z_95 * (mean_flip / (episodes * counts.shape[1])) ** 0.5
    runs = run_noise_floor(seed_sd) if seed_sd else None
    if runs is not None and evaluations is not None:
        runs = max(runs, evaluations)  # a run's score holds its evaluation's noise; a few seeds' sd can say less
    return {"runs": runs, "evaluations": evaluations, "mean_flip_rate": mean_flip}


@dataclass
class Report:
    root: Path
    source: str
    reference: str
    rows: list[ArmRow]
    power: dict
    runs: list[Run]
    notes: list[str]
    shapes: list[ArmRow] | None = None  # the arms on the `shapes` tasks, when every run evaluated them
    shapes_val: list[ArmRow] | None = None  # the arms on the `shapes_val` tasks, when every run evaluated them

    @property
    def tasks(self) -> int:
        return int(self.rows[0].task_rates.shape[1])

    @property
    def episodes(self) -> int:
        return self.runs[0].episodes[self.source]


def unfinished_runs(root: str | Path) -> list[str]:
    """One note per run dir under `root` whose status.json says it did not finish (Ctrl-C, a failed
    update): such a run has no eval.json, so the report leaves it out, and says so."""
    notes = []
    for path in sorted(Path(root).rglob("status.json")):
        try:
            status = json.loads(path.read_text())
        except (OSError, ValueError):
            notes.append(f"left out {path.parent}: unreadable status.json")
            continue
        if status.get("status") != "complete":
            notes.append(f"left out {path.parent}: {status.get('status')} after {status.get('step')} steps"
                         + (f" (resume from {status['last_checkpoint']})" if status.get("last_checkpoint") else ""))
    return notes


def build_report(root: str | Path, reference: str) -> Report:
    runs = find_runs(root)
    source = choose_source(runs)
    arms, notes = group_runs(runs, source)
    notes = list(notes) + unfinished_runs(root)
    reference = choose_reference(arms, reference)
    rows = ablation_rows(arms, source, reference)
    warning = arms_design_warning(int(rows[0].task_rates.shape[1])) if len(rows) > 1 else None
    notes += [f"warning: {warning}"] if warning else []
    kept = [run for by_seed in arms.values() for run in by_seed.values()]
    episodes = kept[0].episodes[source]
    shape_rows = {}
    for split, key in SHAPE_SPLITS.items():
        evaluated = sum(split in r.rates for r in kept)
        if evaluated == len(kept):
            try:
                check_comparable(kept, split)
            except ReportError as err:  # a second table: the report's score stands without it
                notes.append(f"no {split} table: {err}")
                continue
            shape_rows[split] = ablation_rows(arms, split, reference)
        elif evaluated:
            notes.append(f"only {evaluated} of {len(kept)} runs evaluated the {split} tasks ({key} > 0):"
                         f" no {split} table")
    return Report(Path(root), source, reference, rows, power_analysis(rows, episodes=episodes), kept, notes,
                  **shape_rows)
