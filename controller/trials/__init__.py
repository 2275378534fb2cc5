"""Canary trials: launch a candidate engine, replay a traffic shape, measure, gate on quality."""
