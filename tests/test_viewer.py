"""The episode viewer (viewer.html per run, report.html per sweep), rendered in Debian's headless Chromium;
and `eval explain=true`'s failure analysis."""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from in_process import cli_result

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("BUGFIX_RL_REQUIRE_CHROMIUM"),
    reason="Debian's chromium is not installed (.ci/run installs it and then requires this test)")


def render(page: Path) -> tuple[str, list[str]]:
    """(the DOM after load, the console messages) of a page in headless Chromium."""
    assert CHROMIUM, "chromium is required here (BUGFIX_RL_REQUIRE_CHROMIUM is set)"
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout, [line for line in result.stderr.splitlines() if ":CONSOLE" in line]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("viewer_run")
    result = cli_result("train", "+exp=smoke", "threads=1", "preflight=false", f"hydra.run.dir={run_dir}",
                        cwd=ROOT)  # in this process (tests/in_process.py)
    assert result.returncode == 0, result.stderr[-2000:]
    return run_dir


def test_the_run_page_is_self_contained(smoke_run):
    page = (smoke_run / "viewer.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing fetched from elsewhere
    assert "<script" not in page and page.count("data:image/png;base64,") == 2  # dashboard and pass@k inlined


@needs_chromium
def test_the_run_page_renders_episodes_for_every_task_a_legend_and_no_console_error(smoke_run):
    from bugfix_rl.gym.tasks import make_tasks

    dom, console = render(smoke_run / "viewer.html")
    assert console == [], console
    tasks = re.findall(r'class="episode (?:pass|fail)" data-task="([^"]+)"', dom)
    assert set(tasks) == {t.name for t in make_tasks("test")}  # at least one episode per test task
    assert len(re.findall(r'data-task=', dom)) == len(tasks) >= 2 * 5  # base and chosen
    assert 'class="legend"' in dom and "unlikely" in dom and "A &gt; 0" in dom
    assert 'class="tok"' in dom and "log-prob" in dom  # per-token colour with its numbers on hover
    assert 'id="validation"' in dom and 'id="test"' in dom and 'class="env"' in dom


def test_the_run_page_shows_held_out_and_shapes_beside_each_other(tmp_path):
    from bugfix_rl.evaluate.stats import gain_kept, paired_summary, pass_rate_summary
    from bugfix_rl.present.viewer import run_page

    result = {"config": {"experiment": "e", "arm": "a", "seed": 0, "steps": 1}, "chosen_step": 1, "validation": {}}
    for split, final, start in (("heldout", [4] * 10, [2] * 10), ("shapes", [3] * 50, [1] * 50)):
        result[split], result[f"{split}_base"] = pass_rate_summary(final, 4), pass_rate_summary(start, 4)
        result[f"{split}_paired_diff"] = paired_summary(final, start, 4)
    result["shapes_gain_kept"] = gain_kept(result["heldout_paired_diff"], result["shapes_paired_diff"])
    page = run_page(tmp_path, result, {}, tokenizer=None)
    assert page.index("<h2>Held-out</h2>") < page.index("<h2>Shapes</h2>")
    assert "chosen checkpoint 0.750 [" in page and "start 0.250 [" in page and "all 50 shapes tasks x 4" in page
    assert "chosen - start, paired over tasks: +0.500 [" in page
    assert "shapes gain / held-out gain: 1.00" in page  # +0.500 on shapes over +0.500 held-out
    without = run_page(tmp_path, {k: v for k, v in result.items() if not k.startswith("shapes")}, {}, tokenizer=None)
    assert "<h2>Held-out</h2>" in without and "Shapes" not in without


def test_the_run_page_shows_shapes_val_after_shapes_without_a_gain_kept_line(tmp_path):
    """eval.shapes_val_n: the validation split of new shapes has its own section (no gain-kept line: that
    ratio is the `shapes` split's)."""
    from bugfix_rl.evaluate.stats import paired_summary, pass_rate_summary
    from bugfix_rl.present.viewer import run_page

    result = {"config": {"experiment": "e", "arm": "a", "seed": 0, "steps": 1}, "chosen_step": 1, "validation": {}}
    for split, final, start in (("shapes", [3] * 50, [1] * 50), ("shapes_val", [2] * 50, [1] * 50)):
        result[split], result[f"{split}_base"] = pass_rate_summary(final, 4), pass_rate_summary(start, 4)
        result[f"{split}_paired_diff"] = paired_summary(final, start, 4)
    page = run_page(tmp_path, result, {}, tokenizer=None)
    assert page.index("<h2>Shapes</h2>") < page.index("<h2>shapes_val</h2>")
    section = page.split("<h2>shapes_val</h2>", 1)[1].split("<h2>", 1)[0]
    assert "id='shapes_val'" in section and "chosen checkpoint 0.500 [" in section and "start 0.250 [" in section
    assert "all 50 shapes_val tasks x 4" in section and "paired over tasks: +0.250 [" in section
    assert "gain" not in section
    shapes_keys = ("shapes", "shapes_base", "shapes_paired_diff")
    only_val = run_page(tmp_path, {k: v for k, v in result.items() if k not in shapes_keys}, {}, tokenizer=None)
    assert "<h2>shapes_val</h2>" in only_val and "<h2>Shapes</h2>" not in only_val


@needs_chromium
def test_the_console_check_catches_a_page_error(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom'); missing();</script></body></html>")
    _, console = render(bad)
    assert any("boom" in line for line in console) and any("Uncaught" in line for line in console)


def test_explain_lists_the_weak_tasks_with_the_oracles_rule(smoke_run, capsys):
    import torch

    from bugfix_rl.evaluate.checkpoint_eval import run_eval
    from bugfix_rl.evaluate.episodes import failure_lines

    torch.set_num_threads(1)
    result = run_eval(str(smoke_run / "checkpoints" / "step_002.safetensors"), "test", n=4, seed=4,
                      explain_below=1.01)  # every task counts as weak here
    failures = result["models"][0]["failures"]
    assert len(failures) == 5
    for entry in failures:
        assert entry["oracle_success"] and entry["oracle_actions"][-1] == "submit"
        assert f"`{entry['correct_op']}`" in entry["oracle_rule"]
        failing = 4 - round(entry["pass_rate"] * 4)
        assert sum(entry["first_edits"].values()) == failing == sum(entry["endings"].values())
        assert len(entry["transcripts"]) == min(2, failing)
    text = "\n".join(failure_lines(failures))
    assert "oracle's rule: the source has" in text and "First edits of the failing episodes" in text
