"""`bugfix-rl report`: the ablation table of a sweep, its forest plot and the power calculation.

Runs are found by their eval.json anywhere under the sweep dir (Hydra's -m layout
<sweep>/<arm>_seed<seed>_<num>/eval.json, or any other nesting) and grouped by the arm and seed
recorded in them. Each run's score is its held-out pass@1 when the run evaluated the held-out tasks
(eval.heldout_n > 0) and the chosen checkpoint's test pass@1 otherwise; one report uses one source
for all runs, so every arm is measured on the same tasks. When every run also evaluated the `shapes`
tasks (eval.shapes_n > 0: function shapes held out from training), a second table compares the arms
on those the same way; the primary source, its verdicts and the power calculation are unchanged.

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

EFFECTS = (0.10, 0.05, 0.02)
FLOOR = 0.05  # arms with mean pass@1 outside [FLOOR, 1 - FLOOR] are left out of the variance estimates
TRAIN_KEYS = ("late_reward", "late_exploit", "final_entropy", "sampled_episodes", "seconds_per_step")


class ReportError(ValueError):
    """The sweep dir cannot be reported on (no runs, mixed tasks, unknown reference); one line."""


@dataclass
class Run:
    """One finished run: where it is, its arm and seed, per-task pass rates [T], training summary."""

    path: Path
    arm: str
    seed: int
    rates: dict[str, torch.Tensor]  # source ('heldout' | 'test' | 'shapes') -> [T] per-task pass@1
    tasks: dict[str, list[str]]  # source -> task names
    episodes: dict[str, int]  # source -> episodes per task
    train: dict = field(default_factory=dict)


def _scores(result: dict) -> dict[str, dict]:
    sources = {}
    if "heldout" in result:
        sources["heldout"] = result["heldout"]
    if "test" in result:
        sources["test"] = result["test"]["chosen"]
    if "shapes" in result:
        sources["shapes"] = result["shapes"]
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
    rows = []
    for arm in order:
        seeds = sorted(arms[arm])
        per_seed = rates[arm].mean(1).tolist()
        train = {k: _mean_of([arms[arm][s].train.get(k) for s in seeds]) for k in TRAIN_KEYS}
        row = ArmRow(arm, seeds, per_seed, sum(per_seed) / len(per_seed), None, train, rates[arm])
        if arm != reference:
            row.diff, row.mde, row.seed_aware = compare_arms(rates[arm], rates[reference])
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
    shapes = None
    with_shapes = sum("shapes" in r.rates for r in kept)
    if with_shapes == len(kept):
        check_comparable(kept, "shapes")
        shapes = ablation_rows(arms, "shapes", reference)
    elif with_shapes:
        notes.append(f"only {with_shapes} of {len(kept)} runs evaluated the shapes tasks (eval.shapes_n > 0):"
                     " no shapes table")
    return Report(Path(root), source, reference, rows, power_analysis(rows, episodes=episodes), kept, notes, shapes)


def forest_rows(report: Report) -> list[dict]:
    return [{"label": f"{r.arm} - {report.reference}", "diff": r.diff[0], "lo": r.diff[1], "hi": r.diff[2]}
            for r in report.rows if r.diff is not None]


def _num(value, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def table_cells(report: Report, row: ArmRow) -> list[str]:
    """The ablation table's cells for one arm (shared by the console and report.md)."""
    paired = ("reference" if row.diff is None
              else f"{row.diff[0]:+.3f} [{row.diff[1]:+.3f}, {row.diff[2]:+.3f}]" + ("" if row.seed_aware else " tasks only"))
    mde = "-" if row.diff is None else (_num(row.mde) if row.seed_aware else "n/a (1 seed)")
    return [row.arm, " ".join(str(s) for s in row.seeds), " ".join(f"{v:.3f}" for v in row.per_seed),
            f"{row.mean:.3f}", paired, mde, _num(row.train["late_reward"]), _num(row.train["late_exploit"], ".2f"),
            _num(row.train["final_entropy"]), _num(row.train["sampled_episodes"], ".0f"),
            _num(row.train["seconds_per_step"])]


SCORE_NAMES = {"heldout": "held-out", "test": "test", "shapes": "shapes"}  # source -> column name
SHAPES_COLUMNS = 6  # the shapes table: arm .. MDE (the training columns are the main table's)


def table_header(report: Report, source: str | None = None) -> list[str]:
    score = SCORE_NAMES[source or report.source]
    return ["arm", "seeds", f"{score} pass@1 by seed", "mean", f"vs {report.reference} [95% CI, seeds + tasks]",
            "MDE (80%)", "late reward", "exploit", "entropy", "episodes", "s / step"]


def shapes_table(report: Report) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the shapes table: each arm on the `shapes` tasks, compared with the reference
    by the same seed-and-task interval as the main table; empty rows when there is no shapes table."""
    header = table_header(report, "shapes")[:SHAPES_COLUMNS]
    return header, [table_cells(report, row)[:SHAPES_COLUMNS] for row in report.shapes or []]


def describe_shapes(report: Report) -> str:
    shapes = report.runs[0]
    return (f"Shapes: pass@1 on {len(shapes.tasks['shapes'])} `shapes` tasks (eval.json 'shapes', chosen checkpoint;"
            f" built from function templates that training never draws), {shapes.episodes['shapes']} episodes per"
            f" task per run; the same seeds-and-tasks interval and MDE as above. The held-out table stays the"
            f" report's score; this one compares the arms on function shapes no arm trained on.")


def describe(report: Report) -> str:
    score = ("held-out tasks (eval.json 'heldout', chosen checkpoint)" if report.source == "heldout"
             else "test tasks (eval.json 'test', chosen checkpoint)")
    return (f"{len(report.runs)} runs, {len(report.rows)} arms; score: pass@1 on {report.tasks} {score},"
            f" {report.episodes} episodes per task per run. The interval vs the reference is a t-interval whose"
            f" variance adds each arm's seed-to-seed variance and the task-to-task variance of the per-task"
            f" differences (Welch-Satterthwaite df; it covered >= 0.94 in docs/STATISTICS.md's simulation);"
            f" MDE is the difference it would detect with 80% power; late reward and exploit use are means of the last 5 training steps, entropy"
            f" is the last step's (nats, policy tokens), episodes are those sampled per run, s / step is the"
            f" training loop's wall-clock per step (sampling + update, evaluations excluded); all averaged over"
            f" seeds.")


def power_lines(power: dict) -> list[str]:
    seed_sd, task_sd = power["seed_sd"], power["task_diff_sd"]
    first = (f"seed sd of an arm mean {_num(seed_sd)}"
             + ("" if seed_sd else " (needs an arm with >= 2 seeds and some spread)")
             + f" | sd of per-task differences {_num(task_sd)}"
             + (f" ({power['task_diff_arm']} vs reference)" if power["task_diff_arm"] else " (needs a second arm)"))
    lines = [first]
    floor = power.get("noise_floor") or {}
    runs = (f"{floor['runs']:.3f} (1.96 sqrt(2) x seed sd, at least the next)" if floor.get("runs")
            else "- (needs an arm with >= 2 seeds)")
    lines.append(f"noise floor (95%, {power['tasks']} tasks x {power['episodes']} episodes): two runs of one arm differ"
                 f" by up to {runs}; two evaluations of one checkpoint by up to {_num(floor.get('evaluations'))}"
                 f" (episode noise alone, mean flip rate {_num(floor.get('mean_flip_rate'))}). A difference between"
                 f" two single runs below the first is noise.")
    if power.get("left_out"):
        lines.append(f"left out of the variance estimates (mean pass@1 at the floor or ceiling): {', '.join(power['left_out'])}")
    for row in power["table"]:
        lines.append(f"effect {row['effect']:.2f}: seeds per arm {_num(row['seeds_per_arm'], 'd')}"
                     f" | paired tasks {_num(row['paired_tasks'], 'd')}"
                     f"  (t-test; the book's z-test: {_num(row['seeds_per_arm_z'], 'd')} | {_num(row['paired_tasks_z'], 'd')})")
    if power.get("components"):
        parts = power["components"]
        lines.append(f"variance parts (pass-rate scale): seed {parts['seed']:.4f}, arm x task {parts['interaction']:.4f},"
                     f" seed x task {parts['seed_task']:.4f}, episodes {parts['episode']:.4f} at {parts['episodes']}")
        lines.append(f"for the seeds-and-tasks interval above, at these {power['tasks']} tasks x {power['episodes']}"
                     " episodes: " + "; ".join(
                         f"effect {row['effect']:.2f} needs {_num(row['design_seeds'], 'd')} seeds per arm"
                         + ("" if row["design_seeds"] else " (not reachable with seeds alone: add tasks)")
                         for row in power["table"]) + " (bugfix-rl plan dir=... sizes other designs)")
    return lines


def verdicts(report: Report) -> list[str]:
    """One markdown bullet per compared arm: its paired difference and what the interval allows one to say."""
    lines = []
    for row in report.rows:
        if row.diff is None:
            continue
        diff, lo, hi = row.diff
        if lo > 0 or hi < 0:
            verdict = (f"the interval excludes 0, so the arm is {'better' if lo > 0 else 'worse'}"
                       f" than the reference by {abs(diff):.2f} (between {min(abs(lo), abs(hi)):.2f} and"
                       f" {max(abs(lo), abs(hi)):.2f})")
        else:
            verdict = (f"the interval includes 0, so {len(row.seeds)} seeds and {report.tasks} tasks cannot tell this"
                       f" arm from the reference; an effect as large as {max(abs(lo), abs(hi)):.2f} is not ruled out")
        verdict += (f"; this design detects {row.mde:.2f} with 80% power" if row.mde is not None
                    else "; one seed: the interval is over tasks only and leaves seed variance out")
        exploit = row.train.get("late_exploit")
        extra = (f"; its late training reward is {row.train['late_reward']:.2f} with exploit use {exploit:.2f}"
                 if exploit is not None and exploit > 0.5 else "")
        lines.append(f"- **{row.arm}**: {diff:+.3f} [{lo:+.3f}, {hi:+.3f}]: {verdict}{extra}.")
    return lines


def write_report(report: Report) -> list[Path]:
    """Write report.md (+ forest_plot.png when there is a comparison) into the sweep dir; their paths."""
    from bugfix_rl.evaluate.plots import forest_plot

    header = table_header(report)
    lines = [f"# Ablation report: {report.root.name}", "", describe(report), "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(table_cells(report, row)) + " |" for row in report.rows]
    rows, written = forest_rows(report), []
    if rows:
        written.append(report.root / "forest_plot.png")
        forest_plot(rows, str(written[-1]), title=f"pass@1 difference vs {report.reference} (95% CI over seeds and tasks)")
        lines += ["", "![forest plot](forest_plot.png)"]
    else:
        lines += ["", "(only the reference arm: no comparison, no forest plot)"]
    if report.shapes:
        header, cells = shapes_table(report)
        lines += ["", "## Shapes (function shapes held out from training)", "", describe_shapes(report), "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
    lines += ["", "## Power (alpha 0.05, power 0.8)", "", "```"] + power_lines(report.power) + ["```"]
    lines += ["", "## Runs", ""] + [f"- `{r.path.relative_to(report.root) if r.path != report.root else '.'}`:"
                                    f" arm {r.arm}, seed {r.seed}, pass@1 {r.rates[report.source].mean():.3f}"
                                    for r in sorted(report.runs, key=lambda r: (r.arm, r.seed))]
    if report.notes:
        lines += ["", "Notes:"] + [f"- {note}" for note in report.notes]
    path = report.root / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return [path] + written
