"""The tables that `make docs` generates (docs/RESULTS.md, ALGORITHMS.md's preset sweep, MEASUREMENT.md's
report example) have the columns the report code prints now: a change to `bugfix-rl report`'s table
fails here until `make docs` has regenerated them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bugfix_rl.evaluate.ablation import Report, table_header

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
    reference = re.fullmatch(r"vs (\S+), paired \[95% CI\]", header[4])
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
