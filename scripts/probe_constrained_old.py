"""How much of a tools checkpoint's failure on new shapes is old_string naming a line the file does not hold?

    .venv/bin/python scripts/probe_constrained_old.py CKPT [--split shapes_val] [--n 8] [--seed 0]

Evaluates CKPT on the split twice on the same stream: as trained, then with the sampler allowed only
old_string tokens that keep old_string a run of whole lines of the file as the last Read (or Edit)
listing shows it (line numbers left out, `<nl>` between lines; the oracle's Edits are whole lines too),
as guided decoding constrains a tool call to a grammar.
Everything else (the line choice among the runs the file holds, new_string, the calls, when to stop)
is the policy's own. Evaluation only: the policy was not trained under the constraint, so the second
number is what the constraint would give this policy at once, not what training with it would give.
Prints pass@1 with its interval for both, the difference paired over tasks, and the Edit failures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import bugfix_rl  # noqa: E402,F401  first: it pins torch's CPU kernels before torch loads (kernels.py)
import torch  # noqa: E402

from bugfix_rl.gym.tasks import SPLITS  # noqa: E402
from bugfix_rl.policy import tiny  # noqa: E402


class OldStringGuide:
    """Masks the logits of forward_step while a row writes an Edit's old_string: only tokens that extend it
    into a run of the file from a line's start (as the latest listing in the row's context shows it) stay,
    and `new` once it ends with a whole line. Each row's context is rebuilt from what the sampler feeds (a new cache: a new batch)."""

    def __init__(self, tokenizer):
        word = {w: i for i, w in enumerate(tokenizer.words)}
        self.edit, self.old, self.new = word["Edit"], word["old"], word["new"]
        self.nl, self.separator = word["<nl>"], word[";"]
        self.eoo, self.eoa = tokenizer.end_of_observation_id, tokenizer.end_of_action_id
        self.numbers = {i for w, i in word.items() if w.isdigit()}
        self.history: list[list[int]] = []
        self.cache = None
        self.masked_steps = 0

    def file_runs(self, context: list[int]) -> list[int] | None:
        """The latest listing's tokens without its line numbers (None if the context holds none)."""
        bounds = [i for i, t in enumerate(context) if t in (self.eoa, self.eoo)]  # each segment's end
        for k in range(len(bounds) - 1, -1, -1):
            if context[bounds[k]] != self.eoo:
                continue  # an action, not an observation
            segment = context[bounds[k - 1] + 1 if k else 1:bounds[k]]  # (the first one after bos)
            if segment and segment[0] in self.numbers:
                return [t for j, t in enumerate(segment) if not (j == 0 or segment[j - 1] == self.nl)]
        return None

    def allowed(self, context: list[int]) -> list[int] | None:
        last_obs = max((i for i, t in enumerate(context) if t == self.eoo), default=-1)
        action = context[last_obs + 1:]
        call_start = max((i + 1 for i, t in enumerate(action) if t == self.separator), default=0)
        call = action[call_start:]
        if len(call) < 3 or call[0] != self.edit or call[2] != self.old or self.new in call:
            return None
        prefix, text = call[3:], self.file_runs(context[:last_obs + 1])
        if not text:
            return None
        n = len(prefix)
        starts = [i for i in range(len(text) - n + 1)
                  if (i == 0 or text[i - 1] == self.nl) and text[i:i + n] == prefix]  # from a line's start
        if not starts:
            return None  # already off the file: leave the policy alone
        nxt = {text[i + n] for i in starts if i + n < len(text)}
        whole_lines = n and any(i + n == len(text) or text[i + n] == self.nl for i in starts)
        return sorted(nxt | ({self.new} if whole_lines else set()))  # it ends with a whole line, as the oracle's

    def __call__(self, original):
        def forward_step(model, ids, n_new, cache):
            logits = original(model, ids, n_new, cache)
            if cache is not self.cache:
                self.cache, self.history = cache, [[] for _ in range(ids.shape[0])]
            for b in range(ids.shape[0]):
                self.history[b].extend(ids[b, :int(n_new[b])].tolist())
                keep = self.allowed(self.history[b]) if int(n_new[b]) else None
                if keep:
                    mask = torch.full_like(logits[b], float("-inf"))
                    mask[keep] = 0.0
                    logits[b] = logits[b] + mask
                    self.masked_steps += 1
            return logits
        return forward_step


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

    try:
        policy = load_policy(args.ckpt)
    except (CheckpointError, OSError, UserError, ValueError) as err:  # one line, exit 1: a wrong path is not a crash
        sys.exit(f"probe_constrained_old: {err}")
    if policy.cfg.env.name != "tools":
        sys.exit(f"probe_constrained_old: {args.ckpt} was trained on env={policy.cfg.env.name}; the guide reads"
                 " the tools env's Edit calls")
    original, guide = tiny.TinyAgent.forward_step, OldStringGuide(policy.tokenizer)
    results = {}
    try:
        for label in ("as trained", "old_string guided"):
            tiny.TinyAgent.forward_step = original if label == "as trained" else guide(original)
            results[label] = evaluate_policy(policy, args.split, args.n, args.seed, top=3)
    finally:
        tiny.TinyAgent.forward_step = original
    for label, result in results.items():
        p1, behaviour = result["pass_at_k"]["1"], result["behaviour"]
        print(f"{label}: pass@1 {p1['value']:.3f} [{p1['ci'][0]:.3f}, {p1['ci'][1]:.3f}] ({len(result['per_task'])}"
              f" {args.split} tasks x {args.n}); not_found {behaviour.get('failed_not_found', 0):.3f}, no_change"
              f" {behaviour.get('failed_no_change', 0):.3f}, malformed {behaviour.get('malformed', 0):.3f} per episode;"
              f" per task {result['per_task']}")
    d = paired_difference(results["old_string guided"], results["as trained"], args.n)
    print(f"guided - as trained, paired over tasks: {d['diff']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}];"
          f" guided sampling steps {guide.masked_steps}")


if __name__ == "__main__":
    main()
