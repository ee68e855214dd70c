"""Scripted agents of the gym's envs (observation text -> the next action's words): the oracles, the
noisy agents the RL bases clone, random and exploiting baselines. `scripted.py` plays the edit menu,
`scripted_tools.py` the tools env; neither holds a model."""
