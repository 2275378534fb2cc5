"""The candidate engine of a trial: launchers, the engine's log, the tiny local model."""
