"""Signals from production and from trials: drift of the traffic shape, SLO breach, the burn-rate SLO signal,
measurement noise, and which span of metrics a cycle reads. Pure."""
