"""The tables that `make docs` generates (docs/RESULTS.md, ALGORITHMS.md's preset sweep, MEASUREMENT.md's
report example) have the columns the report code prints now: a change to `bugfix-rl report`'s table
fails here until `make docs` has regenerated them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bugfix_rl.evaluate.ablation import Report
from bugfix_rl.present.ablation_report import table_header

DOCS = Path(__file__).resolve().parents[1] / "docs"
GENERATED = ["RESULTS.md", "ALGORITHMS.md", "MEASUREMENT.md"]


def report_tables(text: str) -> list[list[list[str]]]:
    """Every markdown table whose first column is `arm` and second `seeds`: rows of cells, header first."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if current is None:
                current = [cells] if cells[:2] == ["arm", "seeds"] else []
            elif current:
                current.append(cells)
        else:
            if current:
                tables.append(current)
            current = None
    if current:
        tables.append(current)
    return tables


def expected_header(header: list[str]) -> list[str]:
    """What `table_header` prints for a report with this table's score source and reference arm."""
    reference = re.fullmatch(r"vs (\S+)(, paired)? \[95% CI.*\]", header[4])
    source = "heldout" if header[2].startswith("held-out") else "test"
    report = Report(root=Path("."), source=source, reference=reference.group(1) if reference else "?", rows=[],
                    power={}, runs=[], notes=[])
    return table_header(report)


@pytest.mark.parametrize("name", GENERATED)
def test_generated_report_tables_have_the_columns_the_code_prints(name):
    tables = report_tables((DOCS / name).read_text())
    assert tables, f"docs/{name} has no report table"
    for header, rule, *rows in tables:
        assert header == expected_header(header), f"docs/{name}: run `make docs` (header {header})"
        assert set("".join(rule)) == {"-"} and len(rule) == len(header)
        assert rows and all(len(row) == len(header) for row in rows), f"docs/{name}: a row has other columns"


def test_the_table_reader_sees_a_stale_table():
    stale = "| arm | seeds | held-out pass@1 by seed | mean | vs grpo, paired [95% CI] | late reward |\n|---|---|---|---|---|---|\n"
    header, *_ = report_tables(stale)[0]
    assert header != expected_header(header)


def test_statistics_doc_shows_every_printed_interval_covering():
    """docs/STATISTICS.md's coverage table (scripts/statistics_doc.py writes it) has every cell the
    simulation runs, each at least 0.93; the replaced intervals' table shows them under-covering."""
    text = (DOCS / "STATISTICS.md").read_text()
    block = text.split("<!-- coverage:begin -->")[1].split("<!-- coverage:end -->")[0]
    rows = [line.strip("|").split("|") for line in block.strip().splitlines()[2:]]
    assert len(rows) == 21 and min(float(row[4]) for row in rows) >= 0.93
    replaced = text.split("<!-- replaced:begin -->")[1].split("<!-- replaced:end -->")[0]
    assert min(float(line.strip("|").split("|")[4]) for line in replaced.strip().splitlines()[2:]) < 0.9
    assert "effect 0.10: seeds per arm" in text.split("<!-- plan:begin -->")[1]
