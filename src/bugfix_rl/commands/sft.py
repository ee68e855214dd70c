"""`bugfix-rl sft [cold_start.* overrides]`: the cold start's SFT alone, saved as a checkpoint to train from."""

from __future__ import annotations

from pathlib import Path

from bugfix_rl.commands.configured_policy import configured_policy
from bugfix_rl.present.terminal import output_console


def sft_command(cfg, run_dir: Path) -> Path:
    """`bugfix-rl sft [cold_start.* overrides]`: SFT the configured policy on the cold-start demonstrations,
    save it as <run dir>/sft.safetensors (usable as policy.init=<path>) and print its validation pass@1."""
    from bugfix_rl.checkpoint import model_tensors, save_checkpoint
    from bugfix_rl.recipes.cold_start import cold_start
    from bugfix_rl.run.evaluations import validate_policy
    from bugfix_rl.run.lifecycle import checkpoint_meta

    with configured_policy(cfg) as (model, tokenizer, make_env):
        losses = cold_start(cfg, model, tokenizer, make_env)
        path = Path(run_dir) / "sft.safetensors"
        save_checkpoint(path, model_tensors(model), {**checkpoint_meta(cfg, 0, tokenizer), "sft_losses": losses})
        val = validate_policy(model, tokenizer, make_env, cfg.eval, cfg.algo.temperature)
    console = output_console()
    console.print(f"SFT ({cfg.cold_start.source}, {cfg.cold_start.steps} steps): loss {losses[0]:.3f} -> {losses[-1]:.4f}")
    lo, hi = val["ci"]
    console.print(f"validation pass@1 {val['pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}] ({val['tasks']} tasks x "
                  f"{val['n']} episodes, 1 seed)")
    console.print(f"wrote {path}  (train from it: bugfix-rl train policy.init={path})", soft_wrap=True)
    return path
