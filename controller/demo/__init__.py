"""The embedded demo: Shiftlight tuning a simulated vLLM fleet through a simulated day."""
