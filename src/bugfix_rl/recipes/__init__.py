"""Recipes: how a starting policy is made, above the library it uses (gym, policy, rollout, algo).

The RL base (an SFT'd tiny policy), the cold start before RL, the demonstrations both learn from, and
the tiny Qwen test model: each a procedure over the library's stages, never imported by them.
"""
