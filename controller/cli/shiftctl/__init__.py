"""``shiftctl`` (and ``kubectl shift``): read, follow, approve and patch TunedServices."""
