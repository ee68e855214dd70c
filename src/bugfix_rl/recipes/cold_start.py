"""The cold start (`cold_start.enabled`): SFT before RL, on oracle demonstrations or on the policy's
own successes (rejection sampling), so RL starts from a policy that sometimes succeeds."""

from __future__ import annotations

import torch

from bugfix_rl.errors import PreflightFailed
from bugfix_rl.gym.tasks import make_tasks


def cold_start(cfg, model, tokenizer, make_env) -> list[float]:
    """SFT `model` in place on oracle demonstrations or its own successes; returns the SFT losses.
    Says so on stderr, with progress bars when logger.console is set and stderr is a terminal."""
    from bugfix_rl.algo.sft import sft_train
    from bugfix_rl.gym.envs import oracle_for
    from bugfix_rl.progress import PhaseProgress
    from bugfix_rl.recipes.demonstrations import oracle_demonstrations, rejection_sampled

    cs = cfg.cold_start
    tasks = make_tasks("train")
    progress = PhaseProgress(bars=cfg.logger.console)
    source = (f"{cs.demos} oracle demonstrations" if cs.source == "oracle"
              else f"its own successes in {cs.rejection_per_task} attempts per training task")
    with progress.phase(f"SFT warm-up before RL (cold_start.enabled): {cs.steps} steps on {source}",
                        done="SFT warm-up done"):
        if cs.source == "oracle":
            with progress.stage("oracle demonstrations", cs.demos) as advance:
                demos = oracle_demonstrations(tasks, cs.demos, make_env, tokenizer, oracle_for(cfg.env), cs.seed,
                                              cs.renamed_operands, on_episode=advance, model=model)
        else:
            demos = rejection_sampled(model, tokenizer, tasks, cs.rejection_per_task, make_env,
                                      cfg.algo.temperature, cs.seed)
        if not demos:
            raise PreflightFailed("cold start: rejection sampling found no successful episode to learn from")
        with progress.stage("SFT", cs.steps) as advance:
            return sft_train(model, demos, cs.steps, cs.lr, cs.batch_size, torch.Generator().manual_seed(cs.seed),
                             on_step=lambda loss: advance(f"loss {loss:.3f}"))
