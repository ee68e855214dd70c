"""The episode viewer: one self-contained HTML page per run (`<run dir>/viewer.html`) and per sweep
(`<sweep dir>/report.html`). No server, no network, no script from elsewhere: figures are inlined as
data URIs and the page carries its own CSS.

A run's page shows the dashboard, the validation and test tables, and decoded episodes of the final
evaluations (a few per task, for the starting policy and the trained one, successes and failures).
Each policy token is coloured by its sampling log-prob (the redder, the less likely the sampler found
it) and underlined by the episode's group advantage (blue above the task's mean reward, orange below),
with the exact numbers on hover; the env's text (tool results, observations) sits in grey blocks apart
from the agent's turns.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from urllib.parse import quote

from bugfix_rl.evaluate.episodes import decode_ids, token_runs
from bugfix_rl.evaluate.reliability import reliability_line
from bugfix_rl.present.report_run import (SHAPE_SPLIT_TITLES, chosen_on, gain_kept_lines, over_templates_lines,
                                          rate_text, split_rates_text)

EPISODES_PER_KIND = 2  # successes and failures shown per task and policy

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; } td, th { border: 1px solid #ccc; padding: 3px 8px; }
th { background: #f3f3f3; } img { max-width: 100%; }
.episode { border: 1px solid #ddd; border-radius: 6px; margin: 0.8em 0; padding: 0.5em 0.8em; }
.episode.pass { border-left: 6px solid #2a9d3f; } .episode.fail { border-left: 6px solid #c0392b; }
.meta { font-size: 0.85em; color: #555; margin-bottom: 0.3em; }
.env { background: #f1f1f1; color: #444; font-family: monospace; padding: 2px 6px; margin: 3px 0;
       border-radius: 4px; white-space: pre-wrap; }
.agent { font-family: monospace; margin: 3px 0 3px 1.5em; }
.agent::before { content: "agent \\2192  "; color: #888; }
.tok { padding: 1px 2px; margin: 0 1px; border-radius: 3px; border-bottom: 3px solid transparent; }
.legend span.tok { display: inline-block; min-width: 5em; text-align: center; }
.note { color: #666; font-size: 0.9em; }
"""


def _data_uri(path: Path) -> str | None:
    if not path.is_file():
        return None
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def _e(text) -> str:
    return html.escape(str(text))


def group_advantages(rewards: list[float]) -> list[float]:
    """GRPO's advantage within one task's episodes: (r - mean) / (std + 1e-6), std with n - 1."""
    n = len(rewards)
    if not n:
        return []
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 0.0
    return [(r - mean) / (std + 1e-6) for r in rewards]


def token_style(logp: float, advantage: float) -> str:
    """Background: red with alpha 1 - p (p = exp(logp)); underline: blue (A > 0) or orange (A < 0),
    as opaque as |A| (capped at 2)."""
    alpha = min(max(1.0 - math.exp(logp), 0.0), 1.0)
    weight = min(abs(advantage) / 2.0, 1.0)
    line = f"rgba(31,119,180,{weight:.2f})" if advantage > 0 else f"rgba(255,127,14,{weight:.2f})"
    return f"background: rgba(214,39,40,{0.85 * alpha:.2f}); border-bottom-color: {line if advantage else 'transparent'}"


def episode_html(task: str, trajectory, tokenizer, advantage: float) -> str:
    """One decoded episode: env runs as grey blocks, agent runs as coloured tokens."""
    ok = bool(trajectory.info.success)
    parts = [f'<div class="episode {"pass" if ok else "fail"}" data-task="{_e(task)}">',
             f'<div class="meta">{_e(task)}: {"solved" if ok else "not solved"}, reward {trajectory.reward:g},'
             f" group advantage {advantage:+.2f}, actions {_e(' -> '.join(trajectory.info.actions))}</div>"]
    ids, logps = trajectory.ids, trajectory.sampler_logp
    for policy, start, end in token_runs(trajectory.policy_mask):
        if not policy:
            parts.append('<div class="env">' + _e(decode_ids(tokenizer, trajectory, [int(t) for t in ids[start:end]])) + "</div>")
            continue
        tokens = []
        for index in range(start, end):
            logp = float(logps[index])
            tokens.append(f'<span class="tok" style="{token_style(logp, advantage)}" title="log-prob {logp:.3f}'
                          f' (p {math.exp(logp):.3f}), advantage {advantage:+.2f}">{_e(decode_ids(tokenizer, trajectory, [ids[index]]))}</span>')
        parts.append('<div class="agent">' + "".join(tokens) + "</div>")
    parts.append("</div>")
    return "\n".join(parts)


def pick_episodes(trajectories, task_names: list[str], n: int, per_kind: int = EPISODES_PER_KIND):
    """[(task, trajectory, advantage)]: per task up to `per_kind` successes and `per_kind` failures."""
    chosen = []
    for index, task in enumerate(task_names):
        group = trajectories[index * n:(index + 1) * n]
        advantages = group_advantages([t.reward for t in group])
        for wanted in (True, False):
            picked = [(task, t, a) for t, a in zip(group, advantages) if bool(t.info.success) == wanted]
            chosen += picked[:per_kind]
    return chosen


LEGEND = ('<p class="legend">Policy tokens: <span class="tok" style="{}">likely</span>'
          ' <span class="tok" style="{}">unlikely</span> (background: 1 - p of the sampled token);'
          ' <span class="tok" style="{}">A &gt; 0</span> <span class="tok" style="{}">A &lt; 0</span>'
          " (underline: the episode's group advantage over this task's episodes, GRPO's (r - mean) / std)."
          ' Grey blocks: what the env returned (observations, tool results). Hover a token for its numbers.</p>')


def legend() -> str:
    return LEGEND.format(token_style(-0.01, 0.0), token_style(-3.0, 0.0), token_style(-0.01, 2.0),
                         token_style(-0.01, -2.0))


def _reliability(summary: dict, label: str) -> list[str]:
    """A paragraph with pass^k, the flip rate and the noise floor of one evaluation (none in an eval.json
    written before they existed)."""
    line = reliability_line(summary, summary["tasks"], summary["n"]) if "pass_hat_k" in summary else ""
    return [f"<p class='reliability'>{_e(label)}: {_e(line)}</p>"] if line else []


def run_page(run_dir: Path, result: dict, episodes: dict[str, list], tokenizer) -> str:
    """The HTML of a run's page. episodes: policy label -> pick_episodes(...) output."""
    cfg = result["config"]
    title = f"{cfg['experiment']} / arm {cfg['arm']} / seed {cfg['seed']}"
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title><style>{CSS}</style>"
           f"</head><body><h1>{_e(title)}</h1>",
           f"<p class='note'>{cfg['steps']} steps; chosen checkpoint: step {result['chosen_step']}. Intervals: 95%,"
           " over tasks (docs/STATISTICS.md).</p>"]
    for name, label in (("dashboard.png", "Dashboard"), ("pass_at_k.png", "pass@k, base and chosen")):
        uri = _data_uri(Path(run_dir) / name)
        if uri:
            out.append(f"<h2>{label}</h2><img alt='{_e(label)}' src='{uri}'>")
    out.append(f"<h2>Validation (checkpoint selection, on {_e(chosen_on(result))})</h2><table id='validation'><tr><th>step</th><th>pass@1"
               " [95% CI]</th><th>per task (of n)</th></tr>")
    for step, v in result["validation"].items():
        out.append(f"<tr><td>{_e(step)}</td><td>{rate_text(v)}{_e(split_rates_text(v))}</td><td>{_e(v['per_task'])} of"
                   f" {v['n']}</td></tr>")
    out.append("</table>")
    if "test" in result:
        test = result["test"]
        out.append("<h2>Test</h2><table id='test'><tr><th>model</th><th>pass@1 [95% CI]</th><th>per task</th></tr>")
        for name in ("base", "chosen"):
            out.append(f"<tr><td>{name}</td><td>{rate_text(test[name])}</td><td>{_e(test[name]['per_task'])} of"
                       f" {test[name]['n']}</td></tr>")
        d = test["paired_diff"]
        out.append(f"</table><p>chosen - base, paired over tasks: {d['diff']:+.3f} [{d['ci'][0]:+.3f},"
                   f" {d['ci'][1]:+.3f}]</p>")
        out += _reliability(test["base"], "base") + _reliability(test["chosen"], "chosen")
    if "heldout" in result:
        out.append(f"<h2>Held-out</h2><p>chosen checkpoint {rate_text(result['heldout'])}; start"
                   f" {rate_text(result['heldout_base'])} (all held-out tasks).</p>")
        out += _reliability(result["heldout"], "final") + _reliability(result["heldout_base"], "start")
    for split, (title, what) in SHAPE_SPLIT_TITLES.items():
        if split not in result:
            continue
        d, shapes = result[f"{split}_paired_diff"], result[split]
        out.append(f"<h2>{title}</h2><p id='{split}'>chosen checkpoint {rate_text(shapes)}; start"
                   f" {rate_text(result[f'{split}_base'])} (all {shapes['tasks']} {split} tasks x {shapes['n']}: {what});"
                   f" chosen - start, paired over tasks: {d['diff']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}].</p>")
        out += [f"<p>{_e(line)}</p>" for line in over_templates_lines(d, split)]
        if split == "shapes":
            out += [f"<p>{_e(line)}</p>" for line in gain_kept_lines(result)]
    out.append("<h2>Episodes</h2>")
    if not episodes:
        out.append("<p class='note'>No episodes: this run evaluated no test, held-out, shapes or shapes_val tasks"
                   " (eval.test=false, eval.heldout_n=0, eval.shapes_n=0, eval.shapes_val_n=0).</p>")
    else:
        out.append(legend())
    for label, picked in episodes.items():
        out.append(f"<h3>{_e(label)}</h3>")
        out += [episode_html(task, trajectory, tokenizer, advantage) for task, trajectory, advantage in picked]
    out.append("</body></html>")
    return "\n".join(out)


def write_run_page(run_dir: Path, result: dict, episodes: dict[str, list], tokenizer) -> Path:
    path = Path(run_dir) / "viewer.html"
    path.write_text(run_page(run_dir, result, episodes, tokenizer), encoding="utf-8")
    return path


def sweep_page(report) -> str:
    """`report`'s page: the ablation table, the forest plot, the verdicts, and a link to each run's page."""
    from bugfix_rl.present.ablation_report import (describe, describe_shapes, power_lines, shape_tables,
                                                   shapes_table, table_cells, table_header, verdicts)

    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>report: {_e(report.root.name)}</title>"
           f"<style>{CSS}</style></head><body><h1>Ablation report: {_e(report.root.name)}</h1><table id='ablation'><tr>"]
    out += [f"<th>{_e(h)}</th>" for h in table_header(report)] + ["</tr>"]
    for row in report.rows:
        out.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in table_cells(report, row)) + "</tr>")
    out.append("</table>")
    uri = _data_uri(report.root / "forest_plot.png")
    if uri:
        out.append(f"<img alt='forest plot' src='{uri}'>")
    out.append("<ul>" + "".join(f"<li>{_strong(line[2:])}</li>" for line in verdicts(report)) + "</ul>")
    out.append(f"<p>{_e(describe(report))}</p>")
    for split in shape_tables(report):
        header, cells = shapes_table(report, split)
        out.append(f"<h2>{SHAPE_SPLIT_TITLES[split][0]}</h2><p>{_e(describe_shapes(report, split))}</p><table id='{split}'><tr>"
                   + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>")
        out += ["<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in cells]
        out.append("</table>")
    out.append("<h2>Power (alpha 0.05, power 0.8)</h2><pre id='power'>"
               + "\n".join(_e(line) for line in power_lines(report.power)) + "</pre>")
    out.append("<h2>Runs</h2><ul>")
    for run in sorted(report.runs, key=lambda r: (r.arm, r.seed)):
        relative = run.path.relative_to(report.root) if run.path != report.root else Path(".")
        page = relative / "viewer.html"
        link = (f"<a href='./{_e(quote(page.as_posix()))}'>{_e(relative.as_posix())}</a>" if (run.path / "viewer.html").is_file()
                else _e(relative.as_posix()))
        out.append(f"<li>{link}: arm {_e(run.arm)}, seed {run.seed}</li>")
    out.append("</ul>")
    if report.notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(note)}</li>" for note in report.notes) + "</ul>")
    out.append("</body></html>")
    return "\n".join(out)


def _strong(markdown: str) -> str:
    """A line of report.md's verdicts as HTML: escaped, its **bold** spans as <strong>."""
    parts = _e(markdown).split("**")
    return "".join(f"<strong>{part}</strong>" if i % 2 else part for i, part in enumerate(parts))


def write_sweep_page(report) -> Path:
    path = report.root / "report.html"
    path.write_text(sweep_page(report), encoding="utf-8")
    return path
