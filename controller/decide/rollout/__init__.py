"""Progressive rollout: the weighted steps, the analysis of each step's data, and the lifecycle (start, promotion,
rollback) recorded in status. Pure."""
