"""Observe: read production traffic and serving signals from Prometheus (queries, adapter, profile, forecast)."""
