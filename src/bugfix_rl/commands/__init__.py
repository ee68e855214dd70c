"""The bodies of the `bugfix-rl` commands, one module per command (train, preflight, eval, report,
export, sft, bench, simulate, starts, plan), each called by cli.py with its composed config; and what
they share: configured_policy.py (the policy as train builds it), inputs.py (what a command reads and
writes, checked before Hydra makes a run dir), sweeps.py (a train sweep's arm names and progress).

Nothing is imported here: the CLI imports only the command it runs, so a config error answers before
torch loads.
"""
