"""The trial cache as evidence, through the fake API and the operator's own runtime: an entry written by a tenant
who may edit ConfigMaps but not the TunedService is refused, so the canary really runs and the quality gate with it;
an older signed entry put back after the operator measured again is refused, and so are the entries of a
TunedService deleted and created again under the same name; a cached quality report is judged again against the
gate's current thresholds;
a result judged under an older SLO is measured again under the request's; an oversized entry is skipped while the
others are kept; engine log tails are bounded in lines and bytes wherever the operator stores them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from controller.adapters.kube.canary.progress import TrialCRReporter
from controller.adapters.kube.canary.results import INDEX_KEY, cache_name, data_key
from controller.adapters.kube.crs import trial_name_for
from controller.adapters.kube.manifests import event_manifest
from controller.adapters.kube.status import StatusStore
from controller.crd.models import parse_tuned_service
from controller.domain import SLO, EngineConfig, TargetRef, TrialStatus
from controller.domain.trial import Percentiles, QualityReport, TrialResult
from controller.ports import LoadTester, TrialRequest
from controller.reactor.kubernetes_backend import KubernetesBackend
from controller.reactor.runtime import TargetRuntime
from controller.reactor.settings import ConnectionSettings, OperatorSettings
from controller.trials.cache import TrialCache
from controller.trials.runner import TrialRunner
from tests.support.canary import BUDGET, NS, SHAPE, CountingLauncher, tune_on_preset
from tests.support.fake_engine import FakeEngine
from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import G, V

pytestmark = pytest.mark.kube

SLO_NOW = SLO(ttft_seconds=2, tpot_seconds=0.1)
FP8 = EngineConfig(kv_cache_dtype="fp8")  # lossy: the policy's quality gate covers it
P = Percentiles(p50=0.001, p95=0.002, p99=0.003)


GATE_REPORT = QualityReport(exact_match_rate=1.0, mean_logprob_divergence=0.0, prompts=4, passed=True)


class RecordingGate:
    """The policy's quality gate, standing in for the comparison with the stable variant: records each run."""

    def __init__(self) -> None:
        self.evaluated: list[str] = []

    def evaluate(self, endpoint: str, model: str) -> QualityReport:
        self.evaluated.append(endpoint)
        return GATE_REPORT


@pytest.fixture
def tuned(api: client.ApiClient, policy_dir: Path) -> dict[str, Any]:
    return tune_on_preset(api, policy_dir, "kv", "  kv_cache_dtype: [auto, fp8]\n  max_num_seqs: [64, 128]\n")


def operator_runtime(
    operator_kubeconfig: Path, policy_dir: Path, launcher: CountingLauncher, body: dict[str, Any]
) -> TargetRuntime:
    """A fresh operator's runtime for the TunedService, with the admin's trial cache key file (a mounted Secret)."""
    key_file = policy_dir.parent / "trial-cache-key"
    key_file.write_text("an-operator-only-key-of-at-least-32-bytes\n")
    settings = OperatorSettings.from_env(
        {"SHIFTLIGHT_BACKEND": "kubernetes", "SHIFTLIGHT_TRIAL_CACHE_KEY_FILE": str(key_file)},
        connection=ConnectionSettings(kubeconfig=str(operator_kubeconfig)),
        policy_dir=policy_dir,
        health_port=None,
        metrics_port=None,
        trial_progress_interval_s=0.0,
    )
    spec, _ = parse_tuned_service(body)
    target = TargetRef(namespace=NS, name="workhorse", model=spec.model.name)
    api = config.new_client_from_config(str(operator_kubeconfig))
    return KubernetesBackend(settings, api, trial_launcher=launcher).runtime(target, spec, body)


def runner_of(tester: Any) -> TrialRunner:
    """The canary runner behind the runtime's load tester (through its cache and progress reporting)."""
    while not isinstance(tester, TrialRunner):
        tester = getattr(tester, "inner", None) or tester.runner
    return tester


def cache_of(tester: Any) -> TrialCache:
    """The runtime's trial cache (in front of the runner, or the runner's own)."""
    while getattr(tester, "cache", None) is None:
        tester = getattr(tester, "inner", None) or tester.runner
    cache: TrialCache = tester.cache
    return cache


def trial_request(config: EngineConfig, slo: SLO = SLO_NOW) -> TrialRequest:
    return TrialRequest(TargetRef(NS, "workhorse", "m"), config, SHAPE, slo, BUDGET)


def forged_entry(key: str, result: TrialResult) -> str:
    return json.dumps({"key": key, "storedAt": "2026-12-01T09:00:00Z", "result": result.model_dump(mode="json")})


def claimed(config: EngineConfig, *, slo: SLO, quality: QualityReport | None) -> TrialResult:
    """A result nobody measured: a billion tokens/s within any SLO."""
    return TrialResult(
        config=config, shape=SHAPE, slo=slo, status=TrialStatus.MEASURED, source="kubernetes", duration_s=20,
        completed=10**6, output_tokens_per_s=1e9, total_tokens_per_s=1e9, request_throughput=1e5, goodput_rps=1e5,
        goodput_tokens_per_s=1e9, ttft_s=P, tpot_s=P, quality=quality,
    )  # fmt: skip


PASSED = QualityReport(exact_match_rate=1.0, mean_logprob_divergence=0.0, prompts=16, passed=True)
FORGERIES = {
    # the review's entry: fp8 KV "measured" at 1e9 tokens/s, no quality report, judged under an SLO of an hour
    "huge-goodput-no-quality-own-slo": lambda: claimed(FP8, slo=SLO(ttft_seconds=3600, tpot_seconds=60), quality=None),
    # an entry right in every respect a check of its content could make (the request's SLO, a passed report)
    "consistent-in-every-field": lambda: claimed(FP8, slo=SLO_NOW, quality=PASSED),
    # another config's result under the fp8 config's key
    "another-config-under-the-key": lambda: claimed(EngineConfig(max_num_seqs=64), slo=SLO_NOW, quality=None),
}


@pytest.mark.security
@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_cache_entry_forged_by_a_configmap_only_user_is_refused_so_the_canary_and_quality_gate_run(
    kube: KubeAPIServer,
    alice_kubeconfig: Path,
    operator_kubeconfig: Path,
    policy_dir: Path,
    engine: FakeEngine,
    tuned: dict[str, Any],
    forgery: str,
) -> None:
    # alice has Kubernetes' `edit` rights on ConfigMaps in the namespace, none on the TunedService
    kube.api.denials.update({("alice", "*", "tunedservices"), ("alice", "*", "tunedservices/status")})
    alice = config.new_client_from_config(str(alice_kubeconfig))
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(alice).patch_namespaced_custom_object(
            G, V, NS, "tunedservices", "workhorse", {"spec": {"approvalMode": "auto"}}
        )
    assert refused.value.status == 403

    launcher = CountingLauncher(engine)
    request = trial_request(FP8)
    # she reads what the key of a trial is (model, GPU, engine image, config, shape bucket) and writes the entry
    probe = operator_runtime(operator_kubeconfig, policy_dir, launcher, tuned)
    key = runner_of(probe.ports.load_tester).key(request).encode()
    cm = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=cache_name("workhorse"), namespace=NS),
        data={data_key(key): forged_entry(key, FORGERIES[forgery]())},
    )
    client.CoreV1Api(alice).create_namespaced_config_map(NS, cm)

    # the operator (re)starts and reads its cache: the forged entry is not evidence
    runtime = operator_runtime(operator_kubeconfig, policy_dir, launcher, tuned)
    tester: LoadTester = runtime.ports.load_tester
    gate = RecordingGate()
    runner_of(tester).quality_gate = gate  # type: ignore[assignment]
    result = tester.run(request)

    assert launcher.launches == [FP8], "a canary engine was launched for the trial"
    assert gate.evaluated == [engine.endpoint], "the quality gate ran on the canary"
    assert result.status is TrialStatus.MEASURED, result.reason
    assert result.quality == GATE_REPORT and result.slo == SLO_NOW
    assert result.goodput_tokens_per_s < 1e9 and result.completed == 12
    # the operator's own measurement replaced the forgery in the ConfigMap, signed
    stored = client.CoreV1Api(alice).read_namespaced_config_map(cache_name("workhorse"), NS).data
    entry = json.loads(stored[data_key(key)])
    assert entry["result"]["completed"] == 12 and len(entry.get("mac", "")) == 64


@pytest.mark.security
def test_a_cached_result_judged_under_an_older_slo_is_measured_again_under_the_requests(
    operator_kubeconfig: Path, policy_dir: Path, engine: FakeEngine, tuned: dict[str, Any]
) -> None:
    launcher = CountingLauncher(engine)
    runtime = operator_runtime(operator_kubeconfig, policy_dir, launcher, tuned)
    tester = runtime.ports.load_tester
    config_ = EngineConfig(max_num_seqs=64)
    first = tester.run(trial_request(config_))
    assert first.ok and launcher.launches == [config_]
    assert tester.run(trial_request(config_)) == first  # the same request: served from the cache
    assert launcher.launches == [config_]

    tightened = SLO_NOW.model_copy(update={"tpot_seconds": 0.02})
    again = tester.run(trial_request(config_, tightened))
    assert launcher.launches == [config_, config_], "measured again under the tightened TPOT"
    assert again.slo == tightened and again.ok
    # a new operator reading the ConfigMap serves the result judged under the tightened SLO, and only for it
    restarted = operator_runtime(operator_kubeconfig, policy_dir, launcher, tuned).ports.load_tester
    assert restarted.run(trial_request(config_, tightened)) == again
    assert len(launcher.launches) == 2
    assert restarted.run(trial_request(config_)).slo == SLO_NOW
    assert len(launcher.launches) == 3


def infeasible(seqs: int, *, reason_bytes: int = 0, tail: tuple[str, ...] = ()) -> TrialResult:
    return TrialResult(
        config=EngineConfig(max_num_seqs=seqs), shape=SHAPE, slo=SLO_NOW, status=TrialStatus.INFEASIBLE,
        reason="engine exited " + "x" * reason_bytes, source="kubernetes", log_tail=tail,
    )  # fmt: skip


@pytest.mark.security
@pytest.mark.parametrize(
    ("oversized", "why"),
    [
        (70 * 1024, "over the 64 KiB an entry may hold"),
        (1024 * 1024, "over the whole ConfigMap's byte budget"),
    ],
)
def test_an_oversized_cache_entry_is_skipped_and_the_others_are_kept(
    api: client.ApiClient,
    operator_kubeconfig: Path,
    policy_dir: Path,
    engine: FakeEngine,
    tuned: dict[str, Any],
    oversized: int,
    why: str,
) -> None:
    runtime = operator_runtime(operator_kubeconfig, policy_dir, CountingLauncher(engine), tuned)
    runner, cache = runner_of(runtime.ports.load_tester), cache_of(runtime.ports.load_tester)
    results = [infeasible(8), infeasible(16), infeasible(32, reason_bytes=oversized), infeasible(64)]
    for r in results:
        cache.put(runner.key(trial_request(r.config)), r)

    data = client.CoreV1Api(api).read_namespaced_config_map(cache_name("workhorse"), NS).data
    kept = {data_key(runner.key(trial_request(r.config)).encode()) for r in results if r.config.max_num_seqs != 32}
    assert set(data) - {INDEX_KEY} == kept, why
    # a restarted operator serves the three that fit; the oversized one is measured again
    restarted = cache_of(
        operator_runtime(operator_kubeconfig, policy_dir, CountingLauncher(engine), tuned).ports.load_tester
    )
    assert len(restarted) == 3


LINE = "é" * 3000  # 6,000 bytes of UTF-8 in one log line
TAIL = (*(f"{i:05d} {LINE}" for i in range(1000)), "ValueError: the last line says why")
MAX_LINES, MAX_LINE_BYTES, MAX_TAIL_BYTES = 40, 512, 8 * 1024


def assert_bounded(tail: list[str], where: str) -> None:
    assert 0 < len(tail) <= MAX_LINES, f"{where}: {len(tail)} lines"
    assert all(len(line.encode()) <= MAX_LINE_BYTES for line in tail), f"{where}: a line over {MAX_LINE_BYTES} B"
    assert sum(len(line.encode()) + 1 for line in tail) <= MAX_TAIL_BYTES, f"{where}: over {MAX_TAIL_BYTES} B"
    assert tail[-1] == TAIL[-1], f"{where}: the newest line is kept"


@pytest.mark.security
def test_engine_log_tails_are_bounded_in_lines_and_bytes_wherever_they_are_stored(
    api: client.ApiClient,
    operator_api: client.ApiClient,
    operator_kubeconfig: Path,
    policy_dir: Path,
    engine: FakeEngine,
    tuned: dict[str, Any],
) -> None:
    result = infeasible(64, tail=TAIL)
    request = trial_request(result.config)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

    # the Trial CR's status
    reporter = TrialCRReporter(operator_api, tuned)
    at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    reporter.started(request, at)
    reporter.finished(request, result, at)
    trial = custom.get_namespaced_custom_object(G, V, NS, "trials", trial_name_for("workhorse", result.config, SHAPE))
    assert_bounded(trial["status"]["result"]["log_tail"], "Trial CR status")

    # the TunedService's status
    store = StatusStore(operator_api)
    body = store.read(NS, "workhorse")
    _, base = parse_tuned_service(body)
    store.write(body, base, base.model_copy(update={"trials": (result,)}), now=at)
    status = custom.get_namespaced_custom_object(G, V, NS, "tunedservices", "workhorse")["status"]
    assert_bounded(status["trials"][0]["log_tail"], "TunedService status")

    # an Event quoting the engine's last lines: bounded in bytes, not characters
    event = event_manifest(
        TargetRef(NS, "workhorse", "m"), reason="TrialRecorded", message="\n".join(TAIL[-3:]), warning=True,
        uid=None, now=at,
    )  # fmt: skip
    assert len(event["message"].encode()) <= 1024 and len(event["reason"].encode()) <= 128

    # the cache entry
    runtime = operator_runtime(operator_kubeconfig, policy_dir, CountingLauncher(engine), tuned)
    runner, cache = runner_of(runtime.ports.load_tester), cache_of(runtime.ports.load_tester)
    key = runner.key(request).encode()
    cache.put(runner.key(request), result)
    stored = json.loads(core.read_namespaced_config_map(cache_name("workhorse"), NS).data[data_key(key)])
    assert_bounded(stored["result"]["log_tail"], "cache entry")


class ThresholdGate(RecordingGate):
    """The policy's quality gate as it is now (its thresholds), standing in for the comparison: records each run."""

    def __init__(self, min_exact_match: float, max_logprob_divergence: float) -> None:
        super().__init__()
        self.min_exact_match = min_exact_match
        self.max_logprob_divergence = max_logprob_divergence


def measured(config: EngineConfig, goodput: float, quality: QualityReport | None = None) -> TrialResult:
    """A result the operator measured (and signed when it stored it)."""
    return TrialResult(
        config=config, shape=SHAPE, slo=SLO_NOW, status=TrialStatus.MEASURED, source="kubernetes", duration_s=20,
        completed=12, output_tokens_per_s=goodput, total_tokens_per_s=goodput, request_throughput=1.0,
        goodput_rps=1.0, goodput_tokens_per_s=goodput, ttft_s=P, tpot_s=P, quality=quality,
    )  # fmt: skip


def cache_data(api: client.ApiClient) -> dict[str, str]:
    data: dict[str, str] = client.CoreV1Api(api).read_namespaced_config_map(cache_name("workhorse"), NS).data
    return data


@pytest.mark.security
@pytest.mark.parametrize("replayed", ["the-entry", "the-entry-and-its-index"])
def test_an_older_signed_entry_put_back_after_a_new_measurement_is_refused(
    kube: KubeAPIServer,
    api: client.ApiClient,
    alice_kubeconfig: Path,
    operator_kubeconfig: Path,
    policy_dir: Path,
    engine: FakeEngine,
    tuned: dict[str, Any],
    replayed: str,
) -> None:
    config_ = EngineConfig(max_num_seqs=64)
    request = trial_request(config_)
    runtime = operator_runtime(operator_kubeconfig, policy_dir, CountingLauncher(engine), tuned)
    runner, cache = runner_of(runtime.ports.load_tester), cache_of(runtime.ports.load_tester)
    key = runner.key(request)
    cache.put(key, measured(config_, 1256.0))
    old = cache_data(api)  # what a ConfigMap-only user copies while it is there
    cache.put(key, measured(config_, 76.0))  # measured again, worse
    # alice, with ConfigMap rights only, puts the older signed entry back (and the index of that time)
    kube.api.denials.update({("alice", "*", "tunedservices"), ("alice", "*", "tunedservices/status")})
    alice = client.CoreV1Api(config.new_client_from_config(str(alice_kubeconfig)))
    dkey = data_key(key.encode())
    put_back = {dkey: old[dkey], INDEX_KEY: old[INDEX_KEY]} if replayed != "the-entry" else {dkey: old[dkey]}
    alice.patch_namespaced_config_map(cache_name("workhorse"), NS, {"data": put_back})
    assert cache_data(api)[dkey] == old[dkey]

    # the operator (re)starts: the old entry is not served; the trial runs on a canary
    launcher = CountingLauncher(engine)
    restarted = operator_runtime(operator_kubeconfig, policy_dir, launcher, tuned).ports.load_tester
    assert len(cache_of(restarted)) == 0
    result = restarted.run(request)
    assert launcher.launches == [config_]
    assert result.goodput_tokens_per_s != 1256.0


@pytest.mark.security
def test_the_entries_of_a_tunedservice_deleted_and_created_again_are_refused(
    api: client.ApiClient,
    operator_kubeconfig: Path,
    policy_dir: Path,
    engine: FakeEngine,
    tuned: dict[str, Any],
) -> None:
    config_ = EngineConfig(max_num_seqs=64)
    request = trial_request(config_)
    runtime = operator_runtime(operator_kubeconfig, policy_dir, CountingLauncher(engine), tuned)
    runner, cache = runner_of(runtime.ports.load_tester), cache_of(runtime.ports.load_tester)
    cache.put(runner.key(request), measured(config_, 1256.0))
    old = cache_data(api)
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    custom.delete_namespaced_custom_object(G, V, NS, "tunedservices", "workhorse")
    body = {k: v for k, v in tuned.items() if k != "status"}
    body["metadata"] = {"name": "workhorse", "namespace": NS}
    again: dict[str, Any] = custom.create_namespaced_custom_object(G, V, NS, "tunedservices", body)
    assert again["metadata"]["uid"] != tuned["metadata"]["uid"]
    # the old entries, signed for the old uid, are put (or left) in the cache ConfigMap of the same name
    try:
        core.delete_namespaced_config_map(cache_name("workhorse"), NS)
    except ApiException as exc:
        assert exc.status == 404
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=cache_name("workhorse"), namespace=NS), data=old)
    core.create_namespaced_config_map(NS, cm)

    launcher = CountingLauncher(engine)
    restarted = operator_runtime(operator_kubeconfig, policy_dir, launcher, again).ports.load_tester
    assert len(cache_of(restarted)) == 0
    restarted.run(request)
    assert launcher.launches == [config_]


@pytest.mark.security
def test_a_cached_quality_report_is_judged_again_after_the_admin_raises_min_exact_match(
    operator_kubeconfig: Path, policy_dir: Path, engine: FakeEngine, tuned: dict[str, Any]
) -> None:
    request = trial_request(FP8)
    at_092 = QualityReport(exact_match_rate=0.92, mean_logprob_divergence=0.01, prompts=16, passed=True)
    launcher = CountingLauncher(engine)
    runtime = operator_runtime(operator_kubeconfig, policy_dir, launcher, tuned)
    runner, tester = runner_of(runtime.ports.load_tester), runtime.ports.load_tester
    assert runner.quality_gate is not None and runner.quality_gate.min_exact_match == 0.9
    cache_of(tester).put(runner.key(request), measured(FP8, 500.0, at_092))
    assert tester.run(request).quality == at_092  # passed under 0.9: served
    assert launcher.launches == []

    # the admin raises min_exact_match to 0.99: the operator reads the policy again
    kv = policy_dir / "kv.yaml"
    kv.write_text(kv.read_text() + "quality_gate:\n  min_exact_match: 0.99\n")
    raised = operator_runtime(operator_kubeconfig, policy_dir, launcher, tuned)
    raised_runner = runner_of(raised.ports.load_tester)
    assert raised_runner.quality_gate is not None and raised_runner.quality_gate.min_exact_match == 0.99
    gate = ThresholdGate(0.99, raised_runner.quality_gate.max_logprob_divergence)
    raised_runner.quality_gate = gate  # type: ignore[assignment]
    result = raised.ports.load_tester.run(request)
    assert launcher.launches == [FP8], "the cached 0.92 fails the raised gate: measured again"
    assert gate.evaluated == [engine.endpoint]
    assert result.quality == GATE_REPORT
