"""PPO-family training: the controller-side pieces of one RL step (replay buffer, trainer modes)."""
