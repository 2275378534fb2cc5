"""Trials on the ``kubernetes`` backend, through the fake API: the Trial CR is created when a trial starts, with what
is measured, its budget and seed, why and on whose proposal, and carries its progress (stage, requests done of
planned, elapsed, live tokens/s) until it ends with the result; its reporter is its only writer. The result is
cached in a ConfigMap owned by the TunedService, so a new operator instance (with the same cache key) serves the
same trial from it without launching anything; entries read back from that ConfigMap are validated one by one."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from controller.adapters.kube.canary.progress import ProgressUpdate, ReportingLoadTester, TrialCRReporter
from controller.adapters.kube.canary.results import INDEX_KEY, ConfigMapResultStore, EntrySigner, cache_name, data_key
from controller.adapters.kube.crs import trial_name_for
from controller.crd.models import parse_tuned_service
from controller.domain import SLO, EngineConfig, TargetRef, TrialStatus
from controller.domain.trial import Percentiles, TrialResult
from controller.ports import TrialRequest
from controller.reactor.kubernetes_backend import KubernetesBackend
from controller.reactor.runtime import TargetRuntime
from controller.reactor.settings import OperatorSettings
from controller.trials.background import BackgroundLoadTester
from controller.trials.cache import CachedTrials, TrialCache
from controller.trials.engine.launchers import Launch
from controller.trials.runner import TrialRunner
from tests.support.canary import BUDGET, NS, SHAPE, CountingLauncher, canary_settings, tune_on_preset
from tests.support.fake_engine import FakeEngine
from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import G, V

pytestmark = pytest.mark.kube

TRIALS = f"{G}/{V}/trials"


@pytest.fixture
def tuned(api: client.ApiClient, policy_dir: Path) -> dict[str, Any]:
    return tune_on_preset(api, policy_dir, "plain", "  max_num_seqs: [64, 128]\n")


CACHE_KEY = b"k" * 32  # the admin's trial cache key (a mounted Secret in the chart)
SIGNER = EntrySigner(CACHE_KEY)


def operator_instance(
    operator_kubeconfig: Path, policy_dir: Path, launcher: CountingLauncher, body: dict[str, Any]
) -> TargetRuntime:
    """A fresh operator's runtime for the TunedService (its own API client, backend and in-memory state), with the
    admin's trial cache key file."""
    key_file = policy_dir.parent / "trial-cache-key"
    key_file.write_bytes(CACHE_KEY + b"\n")
    settings = canary_settings(operator_kubeconfig, policy_dir, trial_cache_key_file=key_file)
    operator_api = config.new_client_from_config(str(operator_kubeconfig))
    spec, _ = parse_tuned_service(body)
    target = TargetRef(namespace=NS, name="workhorse", model=spec.model.name)
    return KubernetesBackend(settings, operator_api, trial_launcher=launcher).runtime(target, spec, body)


def trial_request(config: EngineConfig, *, proposed_by: str = "", reason: str = "") -> TrialRequest:
    return TrialRequest(
        TargetRef(NS, "workhorse", "m"),
        config,
        SHAPE,
        SLO(ttft_seconds=2, tpot_seconds=0.1),
        BUDGET,
        seed=7,
        reason=reason,
        proposed_by=proposed_by,
    )


def test_a_trial_reports_progress_in_its_cr_and_a_new_operator_serves_it_from_the_configmap(
    kube: KubeAPIServer,
    api: client.ApiClient,
    operator_kubeconfig: Path,
    policy_dir: Path,
    engine: FakeEngine,
    tuned: dict[str, Any],
) -> None:
    launcher = CountingLauncher(engine)
    why = "trial 2/8: the agent expects more goodput from a larger batch"
    request = trial_request(EngineConfig(max_num_seqs=64), proposed_by="agent-qwen", reason=why)
    first = operator_instance(operator_kubeconfig, policy_dir, launcher, tuned)
    assert isinstance(first.ports.load_tester, CachedTrials)
    assert isinstance(first.ports.load_tester.inner, ReportingLoadTester)
    result = first.ports.load_tester.run(request)
    assert result.status is TrialStatus.MEASURED, result.reason
    assert len(launcher.launches) == 1

    name = trial_name_for("workhorse", request.config, SHAPE)
    spec = kube.api.versions(TRIALS, NS, name)[-1]["spec"]
    assert (spec["proposedBy"], spec["reason"], spec["seed"]) == ("agent-qwen", why, 7)
    assert spec["budget"] == {
        "durationSeconds": 20.0,
        "warmupSeconds": 0.0,
        "maxRequests": 12,
        "startupTimeoutSeconds": 5.0,
    }
    versions = [v.get("status") or {} for v in kube.api.versions(TRIALS, NS, name)]
    running = [s for s in versions if s.get("phase") == "Running"]
    assert running, "the Trial CR was Running while the trial ran"
    assert running[0]["startedAt"] and running[0]["configLabel"] == request.config.label()
    replayed = [s["progress"] for s in running if s["progress"]["stage"] in ("replay", "teardown")]
    assert replayed and replayed[-1]["requestsDone"] == replayed[-1]["requestsPlanned"] == 12
    assert replayed[-1]["outputTokensPerS"] > 0 and replayed[-1]["elapsedSeconds"] >= 0
    final = versions[-1]
    assert final["phase"] == "Succeeded" and final["finishedAt"] and final["progress"]["stage"] == "done"
    assert TrialResult.model_validate(final["result"]).completed == 12
    assert [v.get("status", {}).get("phase") for v in kube.api.versions(TRIALS, NS, name)].count("Succeeded") == 1

    before = len(kube.api.versions(TRIALS, NS, name))
    cm = client.CoreV1Api(api).read_namespaced_config_map(cache_name("workhorse"), NS)
    assert [o.uid for o in cm.metadata.owner_references] == [tuned["metadata"]["uid"]]
    assert cm.metadata.labels["shiftlight.dev/tuned-service"] == "workhorse"
    assert len(set(cm.data) - {INDEX_KEY}) == 1  # one entry, and the signed index

    # the operator restarts: a new instance on the same API serves the same trial key from the ConfigMap
    second = operator_instance(operator_kubeconfig, policy_dir, launcher, tuned)
    again = second.ports.load_tester.run(request)
    assert len(launcher.launches) == 1, "served from the cache, nothing launched"
    assert again == result
    assert len(kube.api.versions(TRIALS, NS, name)) == before  # its Trial is already finished: left as it is
    other = second.ports.load_tester.run(trial_request(EngineConfig(max_num_seqs=128)))
    assert other.ok and len(launcher.launches) == 2  # a new key is measured, and cached next to the first
    assert (
        len(set(client.CoreV1Api(api).read_namespaced_config_map(cache_name("workhorse"), NS).data) - {INDEX_KEY}) == 2
    )


def test_a_trial_left_running_by_a_restart_gets_its_result_from_the_next_reporter(
    kube: KubeAPIServer, operator_api: client.ApiClient, tuned: dict[str, Any], engine: FakeEngine
) -> None:
    request = trial_request(EngineConfig(max_num_seqs=64), proposed_by="optimizer", reason="trial 1/8")
    reporter = TrialCRReporter(operator_api, tuned)
    t0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    reporter.started(request, t0)
    reporter.progress(request, ProgressUpdate(stage="replay", requests_done=3, requests_planned=12, at=t0))
    name = trial_name_for("workhorse", request.config, SHAPE)
    assert kube.api.versions(TRIALS, NS, name)[-1]["status"]["phase"] == "Running"
    runner = TrialRunner(CountingLauncher(engine), model="m", gpu_type="g", engine_version="v")
    result = runner.run(request)
    at = t0 + timedelta(minutes=5)
    # a new operator's reporter, answering the same trial from its cache: the CR exists, unfinished
    TrialCRReporter(operator_api, tuned).recorded(request, result, at)
    stored = kube.api.versions(TRIALS, NS, name)[-1]
    status = stored["status"]
    assert status["phase"] == "Succeeded" and status["result"]["completed"] == result.completed
    assert status["finishedAt"] and stored["spec"]["proposedBy"] == "optimizer"
    count = len(kube.api.versions(TRIALS, NS, name))
    TrialCRReporter(operator_api, tuned).recorded(request, result, at)  # and once finished, it is left alone
    assert len(kube.api.versions(TRIALS, NS, name)) == count


def test_a_result_that_started_nothing_gets_a_finished_trial_of_its_own(
    kube: KubeAPIServer, operator_api: client.ApiClient, tuned: dict[str, Any]
) -> None:
    request = trial_request(EngineConfig(max_num_seqs=32), proposed_by="fallback", reason="the agent was down")
    TrialCRReporter(operator_api, tuned).recorded(
        request, result_for(request.config), datetime(2026, 12, 1, tzinfo=UTC)
    )
    versions = kube.api.versions(TRIALS, NS, trial_name_for("workhorse", request.config, SHAPE))
    assert [v.get("status", {}).get("phase") for v in versions][-1] == "Succeeded"
    spec = versions[-1]["spec"]
    assert (spec["proposedBy"], spec["reason"], spec["target"]) == ("fallback", "the agent was down", "workhorse")


def store(api: client.ApiClient, owner: dict[str, Any], **kw: Any) -> ConfigMapResultStore:
    clock = iter(datetime(2026, 12, 1, 9, 0, tzinfo=UTC) + timedelta(seconds=i) for i in range(10_000))
    meta = owner["metadata"]
    refs = [{"apiVersion": f"{G}/{V}", "kind": "TunedService", "name": meta["name"], "uid": meta["uid"]}]
    return ConfigMapResultStore(
        api,
        namespace=NS,
        name=cache_name("workhorse"),
        owner_references=refs,
        signer=kw.pop("signer", SIGNER),
        now=lambda: next(clock),
        **kw,
    )


def result_for(config: EngineConfig) -> TrialResult:
    p = Percentiles(p50=0.1, p95=0.2, p99=0.3)
    return TrialResult(
        config=config, shape=SHAPE, slo=SLO(), status=TrialStatus.MEASURED, completed=5, ttft_s=p, tpot_s=p
    )


@pytest.mark.security
def test_corrupt_or_hostile_cache_entries_are_dropped_and_the_others_served(
    api: client.ApiClient, operator_api: client.ApiClient, tuned: dict[str, Any]
) -> None:
    good = result_for(EngineConfig(max_num_seqs=64))
    store(operator_api, tuned).save({"k-good": good.model_dump_json()})
    victim = result_for(EngineConfig(max_num_seqs=128))
    forged = json.dumps({"key": "k-good", "storedAt": "2026-12-01T09:00:00Z", "result": victim.model_dump(mode="json")})
    hostile = {
        "t-notjson": "{not json",
        "t-extra": json.dumps({"key": "k-x", "storedAt": "2026-12-01T09:00:00Z", "result": {}, "cmd": "rm -rf /"}),
        data_key("k-bad-result"): json.dumps(
            {"key": "k-bad-result", "storedAt": "2026-12-01T09:00:00Z", "result": {"status": "measured"}}
        ),
        "t-forged": forged,  # claims another entry's key under a data key that is not that key's
        data_key("k-huge"): "x" * (70 * 1024),
    }
    client.CoreV1Api(api).patch_namespaced_config_map(cache_name("workhorse"), NS, {"data": hostile})

    reader = store(operator_api, tuned)
    entries = reader.load()
    assert list(entries) == ["k-good"]
    assert TrialResult.model_validate_json(entries["k-good"]) == good
    assert sorted(reader.dropped) == sorted(hostile)
    cache = TrialCache(reader)  # the operator's cache on top: no error, the valid entry is served
    assert len(cache) == 1
    newer = result_for(EngineConfig(max_num_seqs=256))
    reader.save({**entries, "k-new": newer.model_dump_json()})
    data = client.CoreV1Api(api).read_namespaced_config_map(cache_name("workhorse"), NS).data
    assert sorted(set(data) - {INDEX_KEY}) == sorted([data_key("k-good"), data_key("k-new")])  # the bad ones removed


def test_the_cache_configmap_keeps_the_newest_entries_within_its_bounds(
    api: client.ApiClient, operator_api: client.ApiClient, tuned: dict[str, Any]
) -> None:
    writer = store(operator_api, tuned, max_entries=3)
    entries: dict[str, str] = {}
    for seqs in (8, 16, 32, 64, 128):
        entries[f"k-{seqs}"] = result_for(EngineConfig(max_num_seqs=seqs)).model_dump_json()
        writer.save(dict(entries))
    assert list(store(operator_api, tuned).load()) == ["k-32", "k-64", "k-128"]  # oldest first, newest kept
    data = client.CoreV1Api(api).read_namespaced_config_map(cache_name("workhorse"), NS).data
    one = len(next(v for k, v in data.items() if k != INDEX_KEY))
    small = store(operator_api, tuned, max_bytes=2 * one + 10)
    small.load()
    small.save(dict(entries))
    assert list(store(operator_api, tuned).load()) == ["k-64", "k-128"]  # bounded in bytes as well


class SteppingClock:
    """Injected time: one second later at every reading."""

    def __init__(self) -> None:
        self.t = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

    def now(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t


class RecordingReporter:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[str, Any]] = []

    def _record(self, what: str, value: Any) -> None:
        self.calls.append((what, value))
        if self.fail:
            raise ConnectionError("the API is down")

    def started(self, request: TrialRequest, at: datetime) -> None:
        self._record("started", at)

    def progress(self, request: TrialRequest, update: ProgressUpdate) -> None:
        self._record("progress", update)

    def finished(self, request: TrialRequest, result: TrialResult, at: datetime) -> None:
        self._record("finished", result)

    def recorded(self, request: TrialRequest, result: TrialResult, at: datetime) -> None:
        self._record("recorded", result)


def test_progress_reports_are_throttled_and_end_with_the_last_figures(engine: FakeEngine) -> None:
    reporter = RecordingReporter()
    runner = TrialRunner(CountingLauncher(engine), model="m", gpu_type="g", engine_version="v")
    tester = ReportingLoadTester(runner, reporter, SteppingClock(), min_interval_s=3600.0)
    result = tester.run(trial_request(EngineConfig(max_num_seqs=64)))
    assert result.ok
    kinds = [k for k, _ in reporter.calls]
    assert kinds[0] == "started" and kinds[-1] == "finished"
    updates = [u for k, u in reporter.calls if k == "progress"]
    assert 1 <= len(updates) <= 2  # one patch, then nothing until the interval passed, then the last figures
    last = updates[-1]
    assert last.stage == "teardown" and last.requests_done == last.requests_planned == 12
    assert last.elapsed_s > 0 and last.output_tokens_per_s is not None and last.output_tokens_per_s > 0
    assert runner.progress is None  # the runner's own callback is put back


def test_a_reporter_that_fails_never_fails_the_trial(engine: FakeEngine) -> None:
    reporter = RecordingReporter(fail=True)
    runner = TrialRunner(CountingLauncher(engine), model="m", gpu_type="g", engine_version="v")
    tester = ReportingLoadTester(runner, reporter, SteppingClock(), min_interval_s=0.0)
    result = tester.run(trial_request(EngineConfig(max_num_seqs=64)))
    assert result.status is not TrialStatus.FAILED and result.completed == 12
    assert tester.report_errors == len(reporter.calls) >= 3  # started, progress, finished: each logged


def test_the_progress_interval_and_cache_size_are_operator_settings() -> None:
    env = {"SHIFTLIGHT_TRIAL_PROGRESS_INTERVAL_SECONDS": "2.5", "SHIFTLIGHT_TRIAL_CACHE_MAX_ENTRIES": "50"}
    settings = OperatorSettings.from_env(env)
    assert (settings.trial_progress_interval_s, settings.trial_cache_max_entries) == (2.5, 50)
    defaults = OperatorSettings.from_env({})
    assert (defaults.trial_progress_interval_s, defaults.trial_cache_max_entries) == (5.0, 200)


class GatedLauncher(CountingLauncher):
    """A canary Pod that becomes ready only once the test opens the gate."""

    def __init__(self, engine: FakeEngine) -> None:
        super().__init__(engine)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def start(self, config: EngineConfig, *, timeout_s: float | None = None) -> Launch:
        self.entered.set()
        self.gate.wait()
        return super().start(config, timeout_s=timeout_s)


def test_the_cycle_starts_a_canary_trial_and_polls_it_on_one_worker_per_tuned_service(
    operator_kubeconfig: Path, policy_dir: Path, engine: FakeEngine, tuned: dict[str, Any]
) -> None:
    """On the kubernetes backend the reconciler gets a trial starter: a trial whose Pod is still starting leaves
    the caller free (its handle polls None), and a new generation of the TunedService queues its trials on the
    same worker rather than starting a second canary engine beside the first."""
    launcher = GatedLauncher(engine)
    settings = canary_settings(operator_kubeconfig, policy_dir)
    backend = KubernetesBackend(
        settings, config.new_client_from_config(str(operator_kubeconfig)), trial_launcher=launcher
    )
    spec, _ = parse_tuned_service(tuned)
    target = TargetRef(namespace=NS, name="workhorse", model=spec.model.name)
    first = backend.runtime(target, spec, tuned)
    starter = first.reconciler.ports.load_tester
    assert isinstance(starter, BackgroundLoadTester)
    assert first.ports.load_tester is starter.inner  # what the runtime reports on is what runs the trial

    handle = starter.start(trial_request(EngineConfig(max_num_seqs=64)))
    assert launcher.entered.wait(30)  # the trial is launching on its worker...
    assert handle.poll() is None  # ...and the caller was not held

    newer = {**tuned, "metadata": {**tuned["metadata"], "generation": (tuned["metadata"].get("generation") or 1) + 1}}
    second = backend.runtime(target, spec, newer)
    assert second is not first
    queued = second.reconciler.ports.load_tester
    assert isinstance(queued, BackgroundLoadTester) and queued.executor is starter.executor
    behind = queued.start(trial_request(EngineConfig(max_num_seqs=128)))
    assert len(launcher.launches) == 0 and behind.poll() is None  # queued behind the running trial

    launcher.gate.set()
    assert handle.future.result(timeout=120).status is TrialStatus.MEASURED
    assert behind.future.result(timeout=120).status is TrialStatus.MEASURED
    assert launcher.launches == [EngineConfig(max_num_seqs=64), EngineConfig(max_num_seqs=128)]


@pytest.mark.security
def test_a_signed_entry_changed_or_replayed_elsewhere_is_refused(
    api: client.ApiClient, operator_api: client.ApiClient, tuned: dict[str, Any]
) -> None:
    """Entries are signed over the cache's namespace and name, the trial key, the time stored and the result: a
    tenant can delete entries (the trials run again) but cannot change one, move one under another key, copy one
    from another TunedService's cache, or sign one without the operator's key."""
    good, other = result_for(EngineConfig(max_num_seqs=64)), result_for(EngineConfig(max_num_seqs=128))
    store(operator_api, tuned).save({"k-good": good.model_dump_json(), "k-other": other.model_dump_json()})
    core = client.CoreV1Api(api)
    signed = core.read_namespaced_config_map(cache_name("workhorse"), NS).data
    entry = json.loads(signed[data_key("k-good")])
    richer = {**entry, "result": {**entry["result"], "goodput_tokens_per_s": 1e9}}
    elsewhere = ConfigMapResultStore(
        operator_api, namespace=NS, name=cache_name("another"), owner_references=[], signer=SIGNER
    )
    elsewhere.save({"k-good": good.model_dump_json()})
    copied = core.read_namespaced_config_map(cache_name("another"), NS).data[data_key("k-good")]
    other_key = EntrySigner(b"a-key-the-tenant-made-up-herself-32b")
    where, stamp = f"configmap {NS}/{cache_name('workhorse')}", datetime.fromisoformat(entry["storedAt"])
    uid = tuned["metadata"]["uid"]
    made_up = {**entry, "mac": other_key.sign(where, uid, "k-good", entry["seq"], stamp, good.model_dump_json())}
    hostile = {
        "changed-result": json.dumps(richer),
        "later-stamp": json.dumps({**entry, "storedAt": "2030-01-01T00:00:00Z"}),
        "copied-from-another-cache": copied,
        "signed-with-another-key": json.dumps(made_up),
        "no-mac": json.dumps({k: v for k, v in entry.items() if k != "mac"}),
    }
    for why, value in hostile.items():
        core.patch_namespaced_config_map(cache_name("workhorse"), NS, {"data": {data_key("k-good"): value}})
        reader = store(operator_api, tuned)
        assert list(reader.load()) == ["k-other"], why
        assert reader.dropped == [data_key("k-good")], why
    core.patch_namespaced_config_map(
        cache_name("workhorse"), NS, {"data": {data_key("k-good"): signed[data_key("k-good")]}}
    )
    assert sorted(store(operator_api, tuned).load()) == ["k-good", "k-other"]  # the untouched entry is served


@pytest.mark.security
@pytest.mark.parametrize(("content", "why"), [(None, "cannot read"), (b"short\n", "at least 32")])
def test_a_missing_or_short_cache_key_file_fails_the_operators_start_naming_the_variable(
    tmp_path: Path, content: bytes | None, why: str
) -> None:
    from controller.errors import InvalidInput

    key_file = tmp_path / "key"
    if content is not None:
        key_file.write_bytes(content)
    settings = OperatorSettings.from_env(
        {"SHIFTLIGHT_BACKEND": "kubernetes", "SHIFTLIGHT_TRIAL_CACHE_KEY_FILE": str(key_file)}
    )
    assert settings.trial_cache_key_file == key_file
    with pytest.raises(InvalidInput, match=why) as refused:
        KubernetesBackend(settings, client.ApiClient())
    assert refused.value.field == "SHIFTLIGHT_TRIAL_CACHE_KEY_FILE"
