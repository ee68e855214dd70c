"""scripts/probe_constrained_old.py (its guide is the product's: tests/test_guided_edits.py): bad input is
one line and a non-zero exit, not a traceback."""

from __future__ import annotations

import pytest
from repo_scripts import load_script


def test_a_missing_checkpoint_or_a_bad_count_is_one_line(tmp_path, capsys):
    probe = load_script("probe_constrained_old")
    with pytest.raises(SystemExit) as exit_info:
        probe.main([str(tmp_path / "nothing.safetensors")])
    assert str(exit_info.value.code).startswith("probe_constrained_old: ") and "\n" not in str(exit_info.value.code)
    with pytest.raises(SystemExit) as exit_info:
        probe.main([str(tmp_path / "nothing.safetensors"), "--n", "0"])
    assert exit_info.value.code == 2 and "--n 0 must be >= 1" in capsys.readouterr().err
