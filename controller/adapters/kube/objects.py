"""Kubernetes objects as plain JSON, for code outside this package (the routing adapters, the operator's policy
source): custom objects, ConfigMaps, Services and Deployments read and written through the official client, every
failure translated at this boundary (:func:`controller.adapters.kube.client.kube_errors`: 404 is
:class:`NotFound`, 409/422 :class:`ClusterConflict`, ...). ``what`` names the object in the error message."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.adapters.kube.client import ApiClient, kube_errors
from controller.adapters.kube.manifests import JSON


class KubeObjects:
    """JSON in, JSON out; errors as :mod:`controller.errors` types."""

    def __init__(self, api: ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)

    def _json(self, obj: object) -> JSON:
        body: JSON = self.core.api_client.sanitize_for_serialization(obj)
        return body

    # ----- custom objects -------------------------------------------------------------------------------
    def served(self, group: str, version: str, *, what: str) -> set[str]:
        """The resource names (plurals) the API server serves for ``group/version``; NotFound when it serves none."""
        with kube_errors(what):
            resources = self.custom.get_api_resources(group, version)
        return {str(r.name) for r in (resources.resources or [])}

    def get(self, group: str, version: str, namespace: str, plural: str, name: str, *, what: str) -> JSON:
        with kube_errors(what):
            body: JSON = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
                group, version, namespace, plural, name
            )
        return body

    def create(self, group: str, version: str, namespace: str, plural: str, body: JSON, *, what: str) -> None:
        with kube_errors(what):
            self.custom.create_namespaced_custom_object(group, version, namespace, plural, body)

    def replace(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: JSON, *, what: str
    ) -> None:
        with kube_errors(what):
            self.custom.replace_namespaced_custom_object(group, version, namespace, plural, name, body)

    def delete(self, group: str, version: str, namespace: str, plural: str, name: str, *, what: str) -> None:
        with kube_errors(what):
            self.custom.delete_namespaced_custom_object(group, version, namespace, plural, name)

    # ----- ConfigMaps -----------------------------------------------------------------------------------
    def read_config_map(self, namespace: str, name: str, *, what: str) -> JSON:
        with kube_errors(what):
            return self._json(self.core.read_namespaced_config_map(name, namespace))

    # ----- Services -------------------------------------------------------------------------------------
    def read_service(self, namespace: str, name: str, *, what: str) -> JSON:
        with kube_errors(what):
            return self._json(self.core.read_namespaced_service(name, namespace))

    def create_service(self, namespace: str, body: JSON, *, what: str) -> None:
        with kube_errors(what):
            self.core.create_namespaced_service(namespace, client.V1Service.model_validate(body))

    def delete_service(self, namespace: str, name: str, *, what: str) -> None:
        with kube_errors(what):
            self.core.delete_namespaced_service(name, namespace, _preload_content=False)

    # ----- Deployments ----------------------------------------------------------------------------------
    def list_deployments(self, namespace: str, *, label_selector: str | None = None, what: str) -> list[JSON]:
        with kube_errors(what):
            if label_selector is None:
                listed = self.apps.list_namespaced_deployment(namespace)
            else:
                listed = self.apps.list_namespaced_deployment(namespace, label_selector=label_selector)
        return [self._json(item) for item in listed.items]

    def create_deployment(self, namespace: str, body: JSON, *, exist_ok: bool = False, what: str) -> None:
        """Create a Deployment; with ``exist_ok``, one already there under that name (HTTP 409) is kept."""
        with kube_errors(what):
            try:
                self.apps.create_namespaced_deployment(namespace, client.V1Deployment.model_validate(body))
            except ApiException as exc:
                if not exist_ok or exc.status != 409:
                    raise

    def delete_deployment(self, namespace: str, name: str, *, what: str) -> None:
        with kube_errors(what):
            self.apps.delete_namespaced_deployment(name, namespace)


__all__ = ["KubeObjects"]
