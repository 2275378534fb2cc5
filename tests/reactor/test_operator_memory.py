"""The operator process stays inside the chart's memory limit however large its tenants' legal policies are.

Ten TunedServices, each on a policy of 98,304 raw combinations (just under ``MAX_SPACE_COMBINATIONS``, a known
model and GPU, so the memory-fit oracle runs too), are tuned by one operator process (``python -m
controller.reactor.run``, the simulator backend) until every one of them has a trial (the cycle that ran it asked
the optimizer first). The process's peak resident memory (``VmHWM``) must stay within the chart's
``resources.limits.memory``; the test prints it. Before the optimizer drew a bounded pool, one such policy alone
took the process from 63 to 514 MiB, and ten could not fit.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from controller.crd.wire import parse_tuned_service
from controller.policy.space import MAX_SPACE_COMBINATIONS
from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import REPO, G, V, free_port, tuned_service
from tests.support.operator_setup import operator_env

pytestmark = [pytest.mark.kube, pytest.mark.security, pytest.mark.slow]

TENANTS = 10
VALUES = REPO / "charts/shiftlight/values.yaml"
_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}


def quantity_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity in binary units (``512Mi``) as bytes."""
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", quantity)
    assert match, f"the chart's memory limit {quantity!r} is not in Ki/Mi/Gi"
    return int(match.group(1)) * _UNITS[match.group(2)]


def chart_memory_limit() -> int:
    values = yaml.safe_load(VALUES.read_text())
    return quantity_bytes(str(values["resources"]["limits"]["memory"]))


def wide_policy() -> dict[str, Any]:
    """The hybrid-MTP preset with batching as fine ranges: 2 x 3 x 2 x 2 x 2 x 2 x 64 x 16 = 98,304 combinations."""
    policy = yaml.safe_load((REPO / "policies/v1/hybrid-mtp-workstation.yaml").read_text())
    policy["space"].pop("max_cudagraph_capture_size")
    policy["space"]["max_num_seqs"] = {"min": 8, "max": 512, "step": 8}
    policy["space"]["max_num_batched_tokens"] = {"min": 1024, "max": 16384, "step": 1024}
    policy["rollout"] = {"steps": [25, 50, 100], "bake_seconds": 60, "min_samples": 5}
    policy["trial_budget"] = {"max_trials": 4, "canary_gpu_minutes": 90, "trial_duration_s": 20, "warmup_s": 2}
    policy["llm"] = {"enabled": False}
    policy["approval"] = "manual"
    return policy


def peak_rss(pid: int) -> int:
    """The process's peak resident set (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def trials_of(co: client.CustomObjectsApi, name: str) -> int:
    body = co.get_namespaced_custom_object(G, V, "prod", "tunedservices", name)
    if not body.get("status"):
        return 0
    _, status = parse_tuned_service(body)
    return len(status.trials)


def test_ten_tenants_at_the_combination_limit_fit_the_charts_memory_limit(
    kube: KubeAPIServer, api: client.ApiClient, operator_kubeconfig: Path, tmp_path: Path
) -> None:
    policy = wide_policy()
    from controller.policy.models import Policy

    size = Policy.model_validate(policy).space.product_size()
    assert 0.95 * MAX_SPACE_COMBINATIONS < size <= MAX_SPACE_COMBINATIONS  # legal, and at the limit
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "wide.yaml").write_text(yaml.safe_dump(policy))
    co = client.CustomObjectsApi(api)
    names = [f"tenant-{i}" for i in range(TENANTS)]
    for name in names:
        body = tuned_service(name, route=None)
        body["spec"]["policy"] = {"preset": "wide"}
        co.create_namespaced_custom_object(G, V, "prod", "tunedservices", body)
    limit = chart_memory_limit()
    port = free_port()
    env = operator_env(operator_kubeconfig, policies, port)
    log_path = tmp_path / "operator.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.reactor.run"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    peak = 0
    tuned: set[str] = set()
    try:
        deadline = time.monotonic() + 480
        while len(tuned) < TENANTS:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            peak = max(peak, peak_rss(proc.pid))
            assert peak <= limit, (
                f"peak RSS {peak / 2**20:.0f} MiB is over the chart's limit of {limit / 2**20:.0f} MiB "
                f"with {len(tuned)} of {TENANTS} TunedServices tuned"
            )
            assert time.monotonic() < deadline, f"only {sorted(tuned)} got the optimizer's trials"
            tuned |= {n for n in names if n not in tuned and trials_of(co, n) >= 1}
            time.sleep(0.5)
        peak = max(peak, peak_rss(proc.pid))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    print(
        f"\npeak RSS of the operator with {TENANTS} TunedServices at {size:,} combinations each: "
        f"{peak / 2**20:.0f} MiB (chart limit {limit / 2**20:.0f} MiB)"
    )
    assert peak <= limit
