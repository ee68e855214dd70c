"""Decoded episodes: transcripts, turn-by-turn views, and the failure analysis of weak tasks (§19.6).

`failure_analysis` sets each weak task's failing episodes against the oracle's rule for that task: the
scripted oracle's own actions in the same env, and the keyword rule that picks its op (edit menu), so a
reader sees at once whether the agent picked the wrong op, never edited, or edited and never submitted.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from bugfix_rl.gym.ops import code_states


def token_runs(policy_mask) -> list[tuple[bool, int, int]]:
    """[(is_policy, start, end)]: maximal runs of positions 1.. (after the first token) with one mask value."""
    runs: list[tuple[bool, int, int]] = []
    for index in range(1, len(policy_mask)):
        policy = bool(policy_mask[index])
        if runs and runs[-1][0] == policy:
            runs[-1] = (policy, runs[-1][1], index + 1)
        else:
            runs.append((policy, index, index + 1))
    return runs


def decode_ids(tokenizer, trajectory, ids) -> str:
    """Text of some of a trajectory's ids, its out-of-vocabulary slots read as its own words (a word
    tokenizer's episode; a chat tokenizer has none)."""
    oov_words = getattr(trajectory, "oov_words", ())
    return tokenizer.decode(ids, oov_words) if oov_words else tokenizer.decode(ids)


def turns(trajectory, tokenizer) -> list[tuple[str, str]]:
    """[(speaker, text)]: the episode as alternating env / agent runs of tokens (the prompt is env)."""
    return [("agent" if policy else "env", decode_ids(tokenizer, trajectory, list(trajectory.ids[start:end])))
            for policy, start, end in token_runs(trajectory.policy_mask)]


def transcript(task_name: str, trajectory, tokenizer) -> str:
    """One episode as text: the task, the reward, then each policy turn and observation on its own line."""
    lines = [f"## {task_name}  reward {trajectory.reward:g}  actions {' -> '.join(trajectory.info.actions)}"]
    lines += [("agent: " if speaker == "agent" else "env:   ") + text for speaker, text in turns(trajectory, tokenizer)]
    return "\n".join(lines) + "\n\n"


def oracle_rule(task) -> str:
    """The keyword rule behind the edit-menu oracle's op for this task, in words."""
    from bugfix_rl.gym.agents.scripted import infer_op

    words = code_states(task)[None].compact.split()
    op = infer_op(words)
    cue = next((w for w in ("min", "max", "//", "range", "<", ">") if w in words), None)
    because = f"the source has `{cue}`" if cue else "no min/max, //, range or comparison in the source"
    return f"{because} -> `{op}`" + ("" if op == task.fix_op else f" (the task's fix is `{task.fix_op}`)")


def failure_analysis(trajectories, tasks, n: int, tokenizer, make_env: Callable, oracle_cls, threshold: float = 0.5,
                     episodes_per_task: int = 2, model=None) -> list[dict]:
    """One entry per task whose pass rate is below `threshold` (trajectories task-contiguous, n per task):
    its pass rate, the correct op, the oracle's rule and actions, the first-edit confusions of its
    failing episodes, how they ended, and the transcripts of the first `episodes_per_task` of them.
    The oracle plays as `model` would act (recipes/demonstrations.oracle_episode; None: in the word format)."""
    from bugfix_rl.gym.edit_menu import RENAME_POOL
    from bugfix_rl.recipes.demonstrations import oracle_episode

    weak = []
    for index, task in enumerate(tasks):
        episodes = trajectories[index * n:(index + 1) * n]
        rate = sum(bool(t.info.success) for t in episodes) / n
        if rate >= threshold:
            continue
        failing = [t for t in episodes if not t.info.success]
        env = make_env(task, RENAME_POOL[0])
        oracle = oracle_episode(model, tokenizer, oracle_cls, env)
        first_ops = Counter(t.info.ops[0] if t.info.ops else "none" for t in failing)
        endings = Counter("no submit" if not t.info.submitted else
                          ("submitted unfixed" if t.info.ops else "submitted without an edit") for t in failing)
        final_files = Counter(kind for kind in (final_file(t.info) for t in failing if t.info.ops) if kind)
        weak.append({"task": task.name, "pass_rate": rate, "episodes": n, "correct_op": task.fix_op,
                     "oracle_rule": oracle_rule(task), "oracle_actions": list(oracle.info.actions),
                     "oracle_success": bool(oracle.info.success),
                     "first_edits": dict(first_ops.most_common()), "endings": dict(endings.most_common()),
                     "final_files": dict(final_files.most_common()),
                     "transcripts": [transcript(task.name, t, tokenizer) for t in failing[:episodes_per_task]]})
    return weak


def final_file(info) -> str:
    """What an edited episode's graded file did, from its grading (the tools env; '' where the env grades
    no file, as the edit menu's ops never break one): it did not import (a file that does not parse, or a
    name error at import), timed out, passed some hidden tests, or none; or the grading said something
    else (`graded: crash`, `graded: sandbox_error`, ...), or there was none (`not graded`: the env failed)."""
    if not hasattr(info, "grade_flags"):
        return ""
    if not info.graded:
        return "not graded"
    flags = set(info.grade_flags) - {"non_plain_output"}
    if "import_error" in flags:
        return "does not import"
    if "timeout" in flags:
        return "times out"
    if flags:
        return "graded: " + ", ".join(sorted(flags))
    return "passes some hidden tests" if info.hidden_frac > 0 else "passes no hidden test"


def failure_lines(weak: list[dict]) -> list[str]:
    """Markdown for `failure_analysis`'s entries (eval explain=true and docs/RESULTS.md)."""
    if not weak:
        return ["No task below the threshold."]
    lines = []
    for entry in weak:
        confusions = ", ".join(f"`{op}` {count}" for op, count in entry["first_edits"].items())
        endings = ", ".join(f"{how} {count}" for how, count in entry["endings"].items())
        lines += [f"**{entry['task']}**: pass rate {entry['pass_rate']:.2f} over {entry['episodes']} episodes; correct op"
                  f" `{entry['correct_op']}`; oracle's rule: {entry['oracle_rule']}; oracle's episode:"
                  f" {' -> '.join(entry['oracle_actions'])} ({'solved' if entry['oracle_success'] else 'not solved'}).",
                  f"First edits of the failing episodes: {confusions}. How they ended: {endings}."
                  + _final_files_sentence(entry.get("final_files")), "", "````"]
        lines += [text.rstrip() for text in entry["transcripts"]] + ["````", ""]  # a model's ``` stays inside
    return lines


def _final_files_sentence(final_files: dict | None) -> str:
    """' Their edited files: does not import 5, ...' (the tools env's edited failing episodes), or ''."""
    if not final_files:
        return ""
    return " Their edited files: " + ", ".join(f"{how} {count}" for how, count in final_files.items()) + "."
