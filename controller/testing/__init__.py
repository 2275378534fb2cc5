"""Helpers for tests that need real components (a tiny vLLM server, ...)."""
