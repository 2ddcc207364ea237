"""Floor 3: the processes that train, score and generate (engines, workers, rollout backends)."""
