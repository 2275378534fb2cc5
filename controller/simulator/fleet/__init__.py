"""The simulated production fleet: variants, their ticks, records, history and estimates."""
