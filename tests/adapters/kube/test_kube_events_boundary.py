"""KubeEvents looks up the TunedService's uid through the error boundary: whatever the API answers (an HTTP error,
a connection refused), the Event is still written, without the uid, and nothing raw escapes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.adapters.kube.events import KubeEvents
from controller.domain.observation import TargetRef

TARGET = TargetRef(namespace="prod", name="workhorse", model="m")


class FailingCustomObjects:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def get_namespaced_custom_object(self, *args: Any) -> Any:
        raise self.error


class RecordingCore:
    def __init__(self) -> None:
        self.created: list[Any] = []

    def create_namespaced_event(self, namespace: str, body: Any) -> Any:
        self.created.append(body)
        return client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"e{len(self.created)}"), involved_object=body.involved_object
        )


@pytest.mark.parametrize(
    "error",
    [
        ApiException(status=403, reason="Forbidden"),
        ApiException(status=503, reason="Service Unavailable"),
        urllib3.exceptions.MaxRetryError(None, "/apis", reason="connection refused"),  # type: ignore[arg-type]
        ConnectionRefusedError("connection refused"),
    ],
)
def test_an_event_is_written_without_the_uid_when_the_lookup_fails(error: BaseException) -> None:
    events = KubeEvents(client.ApiClient(), now=lambda: datetime(2026, 12, 1, tzinfo=UTC))
    core = RecordingCore()
    events.custom = FailingCustomObjects(error)  # type: ignore[assignment]
    events.core = core  # type: ignore[assignment]
    events.record(TARGET, "ApprovalRefused", "ignored an approval", warning=True)
    assert len(core.created) == 1
    involved = core.created[0].involved_object
    assert (involved.name, involved.uid) == ("workhorse", None)
    assert core.created[0].reason == "ApprovalRefused"
