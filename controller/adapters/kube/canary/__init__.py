"""The Kubernetes canary trial: one candidate engine as a Pod on the TunedService's canary node pool, measured by
the trial runner.

* :mod:`.manifest`: the trial Pod (the user's pod template with the tuned flags, on the canary pool).
* :mod:`.pods`: :class:`KubernetesLauncher`, which creates the Pod, waits for it and deletes it.
* :mod:`.runner`: :func:`canary_trials`, the runner for one TunedService (manifest, quality gate, launcher).
* :mod:`.progress`: the Trial CR, written while the trial runs and with its result.
* :mod:`.results`: the trial cache's ConfigMap store, so a restarted operator never measures a trial twice.
"""
