"""The operator: kopf wiring and the composition of the adapters into one runtime per TunedService.

* :mod:`.handlers` and :mod:`.run`: the kopf registry (the watch of TunedServices), login, start and stop, with
  leader election, the health and metrics endpoints and the notifiers from the settings.
* :mod:`.scheduler`: every TunedService's cycles on a few shared threads, when each is due, spec changes first.
* :mod:`.loop`: one cycle for one TunedService: read, screen approvals, reconcile, one guarded status write, mirrors.
* :mod:`.backends`, :mod:`.simulator_backend` (with :mod:`.simulator_fleet`), :mod:`.kubernetes_backend`,
  :mod:`.runtime`, :mod:`.policy_source`: the ports, policy and reconciler each TunedService runs with (built by
  :func:`controller.cycle.cycle_for`).
* :mod:`.settings`, :mod:`.metrics`, :mod:`.stats`, :mod:`.policy_refusals`: settings from the environment, the
  operator's metrics, cycle durations, refused policies remembered.

This package is the only one that imports kopf; it reaches Kubernetes through :mod:`controller.adapters.kube`.
"""
