"""How much of a tools checkpoint's failure on new shapes is old_string naming a line the file does not hold?

    .venv/bin/python scripts/probe_constrained_old.py CKPT [--split shapes_val] [--n 8] [--seed 0]

Evaluates CKPT on the split twice on the same stream: as its run sampled (env.guide_old_string as
trained), then with the guide on: the sampler allows only old_string tokens that keep old_string a run
of whole lines of the file as its last Read or Edit listed it (policy/guided_edits.py), as guided
decoding constrains a tool call to a grammar. Everything else (the line choice among the runs the file
holds, new_string, the calls, when to stop) is the policy's own. For a checkpoint trained without the
guide the second number is what the guide gives this policy at once, not what training with it gives.
Prints pass@1 with its interval for both, the difference paired over tasks, and the Edit failures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import bugfix_rl  # noqa: E402,F401  first: it pins torch's CPU kernels before torch loads (kernels.py)

from bugfix_rl.gym.tasks import SPLITS  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ckpt")
    parser.add_argument("--split", default="shapes_val", choices=SPLITS)
    parser.add_argument("--n", type=int, default=8, help="episodes per task (>= 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"--n {args.n} must be >= 1")

    from bugfix_rl.checkpoint import CheckpointError
    from bugfix_rl.errors import UserError
    from bugfix_rl.evaluate.checkpoint_eval import evaluate_policy, load_policy, paired_difference
    from bugfix_rl.gym.tasks import make_tasks

    try:
        policy = load_policy(args.ckpt)
    except (CheckpointError, OSError, UserError, ValueError) as err:  # one line, exit 1: a wrong path is not a crash
        sys.exit(f"probe_constrained_old: {err}")
    if policy.cfg.env.name != "tools":
        sys.exit(f"probe_constrained_old: {args.ckpt} was trained on env={policy.cfg.env.name}; the guide reads"
                 " the tools env's Edit calls")
    trained_with = policy.cfg.env.guide_old_string
    results = {}
    for label, guide in (("as trained", trained_with), ("old_string guided", True)):
        policy.cfg.env.guide_old_string = guide
        results[label] = evaluate_policy(policy, args.split, args.n, args.seed, top=3)
    for label, result in results.items():
        p1, behaviour = result["pass_at_k"]["1"], result["behaviour"]
        print(f"{label}: pass@1 {p1['value']:.3f} [{p1['ci'][0]:.3f}, {p1['ci'][1]:.3f}] ({len(result['per_task'])}"
              f" {args.split} tasks x {args.n}); not_found {behaviour.get('failed_not_found', 0):.3f}, no_change"
              f" {behaviour.get('failed_no_change', 0):.3f}, malformed {behaviour.get('malformed', 0):.3f} per episode;"
              f" per task {result['per_task']}")
    names = [task.name for task in make_tasks(args.split)]
    d = paired_difference(results["old_string guided"], results["as trained"], args.n, names)
    print(f"guided - as trained, paired over tasks: {d['diff']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]"
          + (" (trained with the guide: both runs guided)" if trained_with else ""))
    if "over_templates" in d:
        over = d["over_templates"]
        print(f"guided - as trained, paired over the {over['templates']} templates (each one's tasks averaged):"
              f" {over['diff']:+.3f} [{over['ci'][0]:+.3f}, {over['ci'][1]:+.3f}]")


if __name__ == "__main__":
    main()
