"""What a trial's measurement is worth: the server's own counters, validity and the quality gate."""
