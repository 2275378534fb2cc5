"""Simulated traffic: seeded diurnal shapes, their profiles as data, and the built-in presets."""
