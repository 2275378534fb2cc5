"""The real entry point in its own process: `python -m controller.reactor.run` (what `shiftlight operator` calls)."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from controller.crd.models import parse_tuned_service
from controller.domain.phases import Phase
from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import REPO, G, V, free_port, tuned_service, wait_for
from tests.support.operator_setup import operator_env

pytestmark = pytest.mark.kube


def get(url: str) -> str:
    try:
        return urllib.request.urlopen(url, timeout=2).read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return ""


def test_operator_process_leads_reconciles_and_releases_on_sigterm(
    kube: KubeAPIServer, api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path, tmp_path: Path
) -> None:
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", tuned_service(route=None))
    port = free_port()
    env = operator_env(operator_kubeconfig, policy_dir, port)
    log = (tmp_path / "operator.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.reactor.run"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        wait_for("healthz", lambda: "leader=True" in get(f"http://127.0.0.1:{port}/healthz"), timeout=60, interval=0.2)
        status = wait_for(
            "a first status",
            lambda: (
                (b := co.get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")).get("status") and b
            ),
            timeout=60,
            interval=0.2,
        )
        _, parsed = parse_tuned_service(status)
        assert parsed.phase in (Phase.TRIALLING, Phase.AWAITING_APPROVAL, Phase.OBSERVING)
        assert "shiftlight_cycles_total" in get(f"http://127.0.0.1:{port}/metrics")
        lease = client.CoordinationV1Api(api).read_namespaced_lease("shiftlight-leader", "shiftlight")
        assert lease.spec.holder_identity == "shiftlight-0"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    assert code == 0, (tmp_path / "operator.log").read_text()[-3000:]
    lease = client.CoordinationV1Api(api).read_namespaced_lease("shiftlight-leader", "shiftlight")
    assert lease.spec.holder_identity is None  # released on the way out: a successor need not wait
