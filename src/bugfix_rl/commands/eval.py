"""`bugfix-rl eval ckpt=<file or run dir> [compare=...]`: a checkpoint evaluated on a split, printed."""

from __future__ import annotations

import json
from pathlib import Path

from bugfix_rl.kernels import set_torch_threads
from bugfix_rl.present.terminal import output_console


def eval_command(cfg) -> dict:
    """`bugfix-rl eval ckpt=<file or run dir> [compare=<file or run dir>] split=... n=...`: print the
    evaluation (a run dir: its chosen checkpoint), optionally save it."""
    from bugfix_rl.commands.inputs import checkpoint_of
    from bugfix_rl.errors import UserError
    from bugfix_rl.evaluate.checkpoint_eval import run_eval
    from bugfix_rl.present.tables import print_eval

    set_torch_threads(cfg.threads)
    ckpt, compare = checkpoint_of(cfg.ckpt), cfg.compare and checkpoint_of(cfg.compare)  # a run dir: its chosen one
    try:
        result = run_eval(ckpt, cfg.split, cfg.n, cfg.seed, cfg.top, compare,
                          cfg.explain_below if cfg.explain else None)
    except ValueError as err:
        raise UserError(str(err)) from None
    print_eval(result, output_console())
    if cfg.out:
        out = Path(cfg.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        print(f"wrote {out}")
    return result
