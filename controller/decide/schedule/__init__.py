"""Time-of-day schedule: the switch to a window's config, observing production each cycle, the running account
against the best static config and the daily digest. Pure."""
