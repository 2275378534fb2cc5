"""Capacity: replicas sized from measured per-replica capacity at the SLO, the bracket search that measures it, and
the stable variant's replica count. Pure."""
