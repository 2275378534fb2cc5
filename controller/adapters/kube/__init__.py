"""The Kubernetes adapters on the official ``kubernetes`` client (the only adapters that import it).

* :mod:`.client`: the API client and the error boundary (:func:`kube_errors`).
* :mod:`.cluster`: the Cluster port on Deployments; :mod:`.manifests` and :mod:`.pod_template` build them.
* :mod:`.events`: Kubernetes Events.
* :mod:`.status`: TunedService reads and the one guarded status write; :mod:`.mirror` and :mod:`.crs`: the Trial
  and ConfigRollout CRs.
* :mod:`.approvals`: the SubjectAccessReview approval gate; :mod:`.lease`: leader election.
* :mod:`.canary`: the Kubernetes canary trial (trial Pod manifest and launcher, runner, progress in the Trial CR,
  result cache).
"""

from controller.adapters.kube.client import (
    KubeForbidden,
    KubeUnauthorized,
    KubeUnavailable,
    kube_errors,
    load_api_client,
)
from controller.adapters.kube.cluster import KubeCluster
from controller.adapters.kube.events import KubeEvents

__all__ = [
    "KubeCluster",
    "KubeEvents",
    "KubeForbidden",
    "KubeUnauthorized",
    "KubeUnavailable",
    "kube_errors",
    "load_api_client",
]
