"""bugfix-rl: train small coding agents with RL on a bug-fixing gym, and measure what they learned."""

__version__ = "0.1.0"
