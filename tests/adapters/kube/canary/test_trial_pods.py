"""Canary trials as Pods through the (fake) Kubernetes API: the launcher creates the trial Pod, a stand-in kubelet
runs it (a simulated vLLM replica on loopback) and reports it Ready, the runner measures it over real HTTP, and the
Pod is deleted at teardown. A Pod the kubelet reports OOMKilled comes back as an infeasible result with the reason."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from kubernetes import client

from controller.adapters.kube.canary.manifest import KubernetesTrialManifest, OwnerRef, Toleration
from controller.adapters.kube.canary.pods import POD_LOG_BYTES, POD_LOG_LINES, KubernetesLauncher
from controller.domain import SLO, EngineConfig, LengthDistribution, TargetRef, TrafficShape, TrialStatus
from controller.ports import TrialBudget, TrialRequest
from controller.trials.engine.launchers import Launch, free_port
from controller.trials.engine.log import engine_reason
from controller.trials.runner import TrialRunner
from tests.support.paths import ENGINE_LOGS

pytestmark = pytest.mark.kube

NS = "prod"
SELECTOR = "app.kubernetes.io/component=canary-trial"


class StandInKubelet:
    """Runs each trial Pod as a simulated vLLM replica (or fails it with OOMKilled) and writes the Pod status."""

    def __init__(self, api: client.ApiClient, *, fail_with_oom: bool = False) -> None:
        self.core = client.CoreV1Api(api)
        self.fail_with_oom = fail_with_oom
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.seen: list[dict[str, object]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            pods = self.core.list_namespaced_pod(NS, label_selector=SELECTOR).items
            names = set()
            for pod in pods:
                body = self.core.api_client.sanitize_for_serialization(pod)
                name = body["metadata"]["name"]
                names.add(name)
                if name not in self.running and not any(s["metadata"]["name"] == name for s in self.seen):  # type: ignore[index]
                    self.seen.append(body)
                    self._start(name, body)
            for name in list(self.running):
                if name not in names:  # deleted: stop the engine
                    self.running.pop(name).terminate()
            time.sleep(0.1)

    def _start(self, name: str, pod: dict[str, object]) -> None:
        if self.fail_with_oom:
            terminated = {"reason": "OOMKilled", "exitCode": 137, "message": "CUDA out of memory"}
            container = {"name": "vllm", "ready": False, "restartCount": 0, "image": "vllm", "imageID": "",
                         "state": {"terminated": terminated}}  # fmt: skip
            status = {"phase": "Failed", "containerStatuses": [container]}
            self.core.patch_namespaced_pod_status(name, NS, {"status": status})
            return
        container = pod["spec"]["containers"][0]  # type: ignore[index]
        args = container["args"]
        port = args[args.index("--port") + 1]
        served = args[args.index("--served-model-name") + 1]
        config = EngineConfig.model_validate_json(pod["metadata"]["annotations"]["shiftlight.dev/config-json"])  # type: ignore[index]
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.simulator.server", "--model", "nemotron-3-super-fp8",
             "--gpu", "gb300-dgx-station", "--config", config.model_dump_json(), "--port", port,
             "--served-model-name", served],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.running[name] = proc
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        status = {"phase": "Running", "podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}
        self.core.patch_namespaced_pod_status(name, NS, {"status": status})

    @contextmanager
    def running_pods(self) -> Iterator[StandInKubelet]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(5)
            for proc in self.running.values():
                proc.terminate()
                proc.wait(10)


def manifest(port: int) -> KubernetesTrialManifest:
    return KubernetesTrialManifest(
        namespace=NS, target_name="workhorse", model="/models/workhorse", served_model_name="workhorse",
        node_selector={"shiftlight.dev/pool": "canary"}, tolerations=(Toleration(key="shiftlight.dev/canary"),),
        owner=OwnerRef(api_version="shiftlight.dev/v1alpha1", kind="TunedService", name="workhorse", uid="u-1"),
        port=port, startup_timeout_s=60,
    )  # fmt: skip


def request(config: EngineConfig) -> TrialRequest:
    shape = TrafficShape(arrival_rate_rps=0, concurrency=8, prompt_tokens=LengthDistribution(mean=128),
                         output_tokens=LengthDistribution(mean=64))  # fmt: skip
    return TrialRequest(TargetRef(NS, "workhorse", "workhorse"), config, shape, SLO(ttft_seconds=2, tpot_seconds=0.1),
                        TrialBudget(duration_s=20, warmup_s=0, max_requests=24, startup_timeout_s=60))  # fmt: skip


def test_trial_pod_is_created_measured_and_deleted(api: client.ApiClient, operator_api: client.ApiClient) -> None:
    config = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
    kubelet = StandInKubelet(api)
    with kubelet.running_pods():
        runner = TrialRunner(KubernetesLauncher(operator_api, manifest(free_port()), poll_s=0.1), model="workhorse",
                             gpu_type="gb300-dgx-station", engine_version="0.32.0")  # fmt: skip
        result = runner.run(request(config))
        assert result.status is TrialStatus.MEASURED, result.reason
        assert result.source == "kubernetes" and result.completed >= 24 and result.failed == 0
        assert result.spec_decode is not None
        pod = kubelet.seen[0]
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"shiftlight.dev/pool": "canary"}  # type: ignore[index]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "TunedService"  # type: ignore[index]
        assert "--speculative-config" in spec["containers"][0]["args"]  # type: ignore[index]
        assert client.CoreV1Api(api).list_namespaced_pod(NS, label_selector=SELECTOR).items == []  # torn down


def test_an_oom_killed_trial_pod_is_an_infeasible_result_with_the_reason(
    api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    with StandInKubelet(api, fail_with_oom=True).running_pods():
        runner = TrialRunner(KubernetesLauncher(operator_api, manifest(free_port()), poll_s=0.1), model="workhorse",
                             gpu_type="gb300-dgx-station", engine_version="0.32.0")  # fmt: skip
        result = runner.run(request(EngineConfig(max_num_seqs=1024)))
    assert result.status is TrialStatus.INFEASIBLE
    assert "OOMKilled" in result.reason and "137" in result.reason


class PodLogs:
    """The pod-log read of CoreV1Api, answering with a vLLM start-up failure's whole log."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.asked: list[dict[str, object]] = []

    def read_namespaced_pod_log(self, name: str, namespace: str, **kw: object) -> str:
        self.asked.append(kw)
        return self.text


def test_a_failed_trial_pods_log_gives_the_engines_root_cause(operator_api: client.ApiClient) -> None:
    """vLLM's wrappers after the cause run longer than a short tail: the pod log is read deep and kept bounded."""
    text = (ENGINE_LOGS / "cpu-fp8-kv-no-vector-isa.log").read_text()
    launcher = KubernetesLauncher(operator_api, manifest(free_port()))
    logs = PodLogs(text)
    launcher.core = logs  # type: ignore[assignment]
    tail = launcher.logs(Launch("", "workhorse", False, 0.0, _handle="trial-pod"))
    assert logs.asked == [{"tail_lines": POD_LOG_LINES, "limit_bytes": POD_LOG_BYTES}]
    assert len(tail) < len(text.splitlines())
    assert engine_reason("engine container Error (exit code 1)", tail) == (
        "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    )
