"""The Kubernetes reactor: kopf handlers and the per-TunedService loop wiring observe -> decide -> act.

This package is the only place that imports kopf.
"""
