"""Tuning rounds: starting and running a round, choosing among its trials, the economics of a next trial and of
a switch, and capacity probes of the round's choice. Pure."""
