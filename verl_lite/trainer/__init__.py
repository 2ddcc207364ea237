"""Training loops and their controller-side helpers (PPO trainer, replay buffer, metrics, checkpoints).

Submodules are imported where used, so importing ``verl_lite.trainer`` stays cheap.
"""
