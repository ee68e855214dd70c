"""The run: one training run's life, above evaluate and present and below the commands.

- trainer.py: the Trainer's named stages (sample, advantages, update) and `step`, which composes them;
- preflight.py: the ten invariants, checked by driving a Trainer's stages on the first batch;
- training.py: `run_training`, the run's story from the RL base to the final report;
- lifecycle.py: what a run keeps (RunState, checkpoints), resumes from and says about itself (status.json);
- final_eval.py: choosing the checkpoint on validation and the final evaluations;
- learner.py, distributed.py: the learner's processes; stopping.py, alarms.py: when a run warns or stops.
"""
