"""tests/in_process.py's cli_result gives what a `bugfix-rl` process would print, and leaves the test
process as it found it (the runs that use it share one interpreter)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import torch
from in_process import _file_descriptor_capture, cli_result


def test_descriptor_writes_of_this_process_and_its_children_are_captured():
    with _file_descriptor_capture() as written:
        os.write(1, b"from C code\n")
        os.write(2, b"to fd 2\n")
        subprocess.run([sys.executable, "-c", "import sys; print('child out'); print('child err', file=sys.stderr)"],
                       check=True)
        out, err = written()
    assert out == "from C code\nchild out\n" and err == "to fd 2\nchild err\n"


def test_a_run_leaves_the_root_logger_torch_rng_and_cwd_as_they_were(tmp_path):
    root = logging.getLogger()
    handlers, level, here = root.handlers[:], root.level, os.getcwd()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    result = cli_result("simulate", "steps=2", cwd=tmp_path)  # Hydra configures logging for its run
    assert result.returncode == 0, result.stderr
    assert root.handlers == handlers and root.level == level and os.getcwd() == here
    assert torch.equal(torch.rand(3), expected)
