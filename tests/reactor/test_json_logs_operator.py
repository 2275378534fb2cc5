"""A running operator's logs in ``SHIFTLIGHT_LOG_FORMAT=json``: kopf's handler records come out as one JSON object
per line, with the object they are about, next to the operator's own."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from controller.reactor.logs import log_formatter
from controller.reactor.settings import OperatorSettings
from tests.support.kube_operator import G, V, http_route, operator, tuned_service, wait_for

pytestmark = pytest.mark.kube


def test_kopfs_handler_records_are_json_objects_with_their_object(
    api: client.ApiClient, operator_api: client.ApiClient, settings_for: Callable[[str], OperatorSettings]
) -> None:
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object("gateway.networking.k8s.io", "v1", "prod", "httproutes", http_route())
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service())
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(log_formatter(OperatorSettings.from_env({"SHIFTLIGHT_LOG_FORMAT": "json"})))
    root = logging.getLogger()
    root.addHandler(handler)

    def succeeded() -> list[dict[str, Any]]:
        records = [json.loads(line) for line in stream.getvalue().splitlines()]
        return [r for r in records if r["logger"] == "kopf.objects" and r["message"].endswith("succeeded.")]

    try:
        with operator(settings_for("replica-a"), operator_api):
            wait_for("kopf's record of a handler's success", succeeded)
    finally:
        root.removeHandler(handler)

    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert all(isinstance(r, dict) and {"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert any(r["logger"].startswith("controller.") for r in records)  # the operator's own records, too
    handled = succeeded()
    assert handled[0]["message"] == "Handler 'build_registry.<locals>.seen' succeeded."
    assert handled[0]["object"] == {
        "apiVersion": f"{G}/{V}",
        "kind": "TunedService",
        "namespace": "prod",
        "name": "workhorse",
        "uid": handled[0]["object"]["uid"],
    }
    assert all("settings" not in r for r in records)
