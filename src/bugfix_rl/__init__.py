"""bugfix-rl: train small coding agents with RL on a bug-fixing gym, and measure what they learned."""

from bugfix_rl.kernels import pin_kernels

pin_kernels()  # before torch loads: the same bytes on CPUs that run the same pinned kernels (kernels.py)

__version__ = "0.1.0"
