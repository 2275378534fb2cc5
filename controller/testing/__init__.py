"""What an integrator imports to test their own code against Shiftlight's ports, as ``kopf.testing`` does: port
wrappers that fail as real systems do (:mod:`.faults`) and in-memory ports that record every call (:mod:`.memory`)."""
