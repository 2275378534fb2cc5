"""Adapters: the ports (:mod:`controller.ports`) on real and simulated systems, one folder per provider family.

* :mod:`controller.adapters.kube`: the Kubernetes API (client and error boundary, Deployments, Events, status
  writes and CR mirrors, the approval gate, the Lease) and, in :mod:`controller.adapters.kube.canary`, the
  Kubernetes canary trial.
* :mod:`controller.adapters.routing`: traffic on Gateway API HTTPRoutes and InferencePools.
* :mod:`controller.adapters.notify`: Slack, Grafana annotations and the delivery queue they share.
* :mod:`controller.adapters.simulated`: the simulated fleet as metrics, router, cluster and load tester.

In-memory ports for tests are :mod:`controller.testing.memory`.
"""
