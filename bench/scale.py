"""The operator at fleet scale: 10, 100 and 500 TunedServices in 20 namespaces, one real operator process.

    .venv/bin/python -m bench.scale [--targets 10,100,500] [--cycles-per-target 4] [--namespaces 20]
        [--prometheus-cycles-per-target 1]

For each count, a fresh fake Kubernetes API (``tests/support/kube_api.py``: kmock's emulator, real HTTP, every request
recorded) holds the TunedServices, each beside a user-shaped Deployment (the vLLM production-stack chart's), Service
and HTTPRoute. The operator runs as it does in a cluster: ``python -m controller.reactor.run`` in its own process,
kopf's watch feeding the cycle scheduler (a few threads shared by every TunedService), Lease leader election, as
the operator's own ServiceAccount user. Its production
is the ``simulator`` backend: one simulated vLLM fleet per TunedService on its own fake clock, moved by each
cycle's requeue (``SHIFTLIGHT_TIME_SCALE`` compresses the sleeps), so trials, rollouts, weights on the HTTPRoute and
Events happen as they would, without GPUs. Half the TunedServices approve automatically (rollouts in flight), half
wait for a human (idle once tuned). Along the way 5 % are changed (a new generation: the time until the status
carries it is the reaction time), 5 % deleted and 5 % created.

Reported per count: decide p50/p99 (wall time, and beside it the CPU time of the deciding thread: the wall time
less its waits for the interpreter lock held by the operator's other threads, here mostly the simulated trials) and
cycle p99 per target (from the operator's own histograms), RSS of the
operator process at start (first cycles), middle and end, Kubernetes API calls per cycle per target by verb (the
fake API's record of the operator's user), status writes per cycle when nothing changed (the last quarter of the
run, no spec changes from the bench: the status versions the fake API stored for the TunedServices that stayed
Observing with no rollout, no trial in flight and the same generation through it, per cycle of theirs; the fields
those writes changed are printed), reaction to a spec change (the watch's new generation puts the TunedService
first in the scheduler's queue; trials run beside the cycle) against its goal of one cycle plus 5 s (a cycle as the
operator sleeps it: an Observing TunedService's 60 s requeue at ``--time-scale``; the time between two cycles of
one TunedService when the operator cannot keep up is printed beside it), Prometheus queries per target per cycle
(below), and TunedServices still held after the deletions (the ``shiftlight_tunedservices_held`` gauge against the
live count, and how many of those created without a status have not been cycled yet). Ends with one line for the
largest count:

    scale: 500 targets, decide p99 X ms (cpu X' ms), cycle p99 Y ms/target, RSS A -> M -> B MB over N cycles,
    steady writes W/cycle, api calls C/target/cycle, reaction median R s, slowest S s (goal G s), held/live H/L

Prometheus queries per target: after the run, the same TunedServices on the ``kubernetes`` backend (its metrics
from Prometheus) against a real Prometheus (the Debian package) that scrapes one simulated vLLM replica
(``controller.simulator.server``, vLLM's metric names, under Poisson load) once per namespace, for
``--prometheus-cycles-per-target`` cycles per TunedService: the API requests Prometheus itself counted
(``prometheus_http_requests_total``), per cycle. Not measured here: trials as canary Pods (the Pods of that pass
never start).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from controller.domain.actions import Plan
from controller.reactor.settings import LoopSettings
from tests.support.kube_api import KubeAPI, KubeAPIServer

REPO = Path(__file__).resolve().parents[1]

G, V = "shiftlight.dev", "v1alpha1"
OPERATOR = "system:serviceaccount:shiftlight:op"
STACK = REPO / "tests/adapters/manifests/production-stack.yaml"
#: The goal for a spec change: answered within one cycle of the TunedService plus this.
REACTION_SLACK_S = 5.0


def cycle_length_s(time_scale: float) -> float:
    """One cycle of a TunedService in real seconds, as the operator sleeps it: the requeue an Observing
    TunedService asks for (60 s simulated), compressed by ``time_scale`` (``ControlLoop._sleep``). The goal for a
    spec change is this plus :data:`REACTION_SLACK_S`; the time between two cycles of one TunedService when the
    operator cannot keep up is longer, and is printed beside it, not used as the goal."""
    loop = LoopSettings()
    return max(loop.min_sleep_s, min(Plan().requeue_after_s, loop.max_requeue_s) / time_scale)


def get(url: str) -> str:
    try:
        return str(urllib.request.urlopen(url, timeout=5).read().decode())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return ""


def leading(port: int) -> bool:
    """False only when the operator answers that it is not the leader (an answer late under load is not one)."""
    health = get(f"http://127.0.0.1:{port}/healthz")
    return not health or "leader=True" in health


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ----- what the user has in the cluster -------------------------------------------------------------------------


def policy_dir(root: Path) -> Path:
    policy = yaml.safe_load((REPO / "policies/v1/hybrid-mtp-workstation.yaml").read_text())
    policy["rollout"] = {"steps": [25, 50, 100], "bake_seconds": 120, "min_samples": 5}
    policy["trial_budget"] = {"max_trials": 3, "canary_gpu_minutes": 90, "trial_duration_s": 20, "warmup_s": 2}
    policy["llm"] = {"enabled": False}
    out = root / "policies"
    out.mkdir()
    (out / "scale.yaml").write_text(yaml.safe_dump(policy))
    return out


def deployment(namespace: str, name: str) -> dict[str, Any]:
    body = next(d for d in yaml.safe_load_all(STACK.read_text()) if d and d["kind"] == "Deployment")
    body["metadata"] = {"name": name, "namespace": namespace, "labels": {"app": name}}
    body["spec"]["selector"] = {"matchLabels": {"app": name}}
    body["spec"]["template"]["metadata"]["labels"] = {"app": name, "environment": "prod", "release": name}
    return dict(body)


def service(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 8000, "targetPort": 8000}]},
    }


def http_route(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parentRefs": [{"name": "inference-gateway", "namespace": "gateway"}],
            "rules": [{"backendRefs": [{"name": name, "port": 8000, "weight": 100}]}],
        },
    }


def tuned_service(namespace: str, name: str, *, auto: bool) -> dict[str, Any]:
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "TunedService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "workload": {"deployments": [name], "service": name, "httpRoute": name},
            "model": {"name": "nemotron-3-super-nvfp4"},
            "gpuType": "gb300-dgx-station",
            "policy": {"preset": "scale"},
            "approvalMode": "auto" if auto else "manual",
        },
    }


@dataclass
class Fleet:
    api: client.ApiClient
    namespaces: int
    live: dict[tuple[str, str], bool] = field(default_factory=dict)
    made: int = 0

    def create(self, status: dict[str, Any] | None = None) -> tuple[str, str]:
        """A TunedService with its workload; with ``status``, as a previous operator left it (tuned, steady)."""
        i = self.made
        self.made += 1
        namespace, name = f"team-{i % self.namespaces:02d}", f"svc-{i:04d}"
        apps, core, co = client.AppsV1Api(self.api), client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        apps.create_namespaced_deployment(namespace, client.V1Deployment.model_validate(deployment(namespace, name)))
        core.create_namespaced_service(namespace, client.V1Service.model_validate(service(namespace, name)))
        co.create_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", namespace, "httproutes", http_route(namespace, name)
        )
        co.create_namespaced_custom_object(
            G, V, namespace, "tunedservices", tuned_service(namespace, name, auto=i % 2 == 0)
        )
        if status is not None:
            co.patch_namespaced_custom_object_status(G, V, namespace, "tunedservices", name, {"status": status})
        self.live[(namespace, name)] = True
        return namespace, name

    def delete(self, key: tuple[str, str]) -> None:
        client.CustomObjectsApi(self.api).delete_namespaced_custom_object(G, V, key[0], "tunedservices", key[1])
        del self.live[key]

    def status(self, key: tuple[str, str]) -> dict[str, Any]:
        body = client.CustomObjectsApi(self.api).get_namespaced_custom_object(G, V, key[0], "tunedservices", key[1])
        return dict(body)


# ----- reading the operator --------------------------------------------------------------------------------------


def scrape(port: int) -> str:
    """The operator's metrics; asked again while it does not answer (a busy operator can take seconds)."""
    for _ in range(12):
        text = get(f"http://127.0.0.1:{port}/metrics")
        if "shiftlight_cycles_total" in text:
            return text
    return ""


def sample(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def buckets(text: str, name: str) -> list[tuple[float, float]]:
    out = []
    for le, value in re.findall(rf'^{re.escape(name)}_bucket{{le="([^"]+)"}} ([0-9.e+-]+)$', text, re.M):
        out.append((math.inf if le == "+Inf" else float(le), float(value)))
    return sorted(out)


def quantile(text: str, name: str, q: float) -> float:
    """A quantile from a cumulative Prometheus histogram: the upper bound of the bucket it falls in."""
    rows = buckets(text, name)
    total = rows[-1][1] if rows else 0.0
    if total == 0:
        return math.nan
    for le, count in rows:
        if count >= q * total:
            return le
    return math.inf


def running(status: dict[str, Any]) -> bool:
    """Whether the status says trials are in flight (they finish on their worker and are recorded by a later cycle:
    a status write then is a change)."""
    return any(r.get("code") == "trials-running" for r in status.get("last_reasons") or [])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class PrometheusPass:
    """The same TunedServices on the ``kubernetes`` backend against a real Prometheus: the queries it answered."""

    cycles: int
    queries: int
    by_handler: dict[str, int]
    wall_s: float

    @property
    def per_cycle(self) -> float:
        return self.queries / max(self.cycles, 1)


def prometheus_requests(url: str) -> Counter[str]:
    """Prometheus's own count of the API requests it answered (``prometheus_http_requests_total``), by handler."""
    out = Counter[str]()
    pattern = r'^prometheus_http_requests_total\{code="[^"]*",handler="(/api/v1/[^"]*)"\} ([0-9.e+-]+)$'
    for handler, value in re.findall(pattern, get(f"{url}/metrics"), re.M):
        out[handler] += int(float(value))
    return out


def prometheus_pass(
    env: dict[str, str], port: int, work: Path, namespaces: list[str], cycles_wanted: float, log: Any
) -> PrometheusPass:
    """Run the operator on the ``kubernetes`` backend, its metrics from a real Prometheus (Debian package) that
    scrapes one simulated vLLM replica (``controller.simulator.server``, vLLM's metric names, under Poisson load)
    once per namespace, labelled with it, every second; count the queries Prometheus answered until the operator
    has run ``cycles_wanted`` cycles. Canary trials are Pods on the fake API that never start, so a tuning
    TunedService waits for them: its cycles still observe."""
    from tests.observe.support import poisson_load, running_simulator
    from tests.support.prometheus_server import ScrapeTarget, running_prometheus

    model = "nemotron-3-super-nvfp4"
    began = time.monotonic()
    with running_simulator(model, work, seed=3) as replica:
        targets = [ScrapeTarget(replica.address, {"namespace": ns, "variant": "stable"}) for ns in namespaces]
        with running_prometheus(targets, work / "prometheus") as prom:
            import threading

            stop = threading.Event()

            def load() -> None:
                while not stop.is_set():
                    poisson_load(replica.endpoint, model, rate=1.0, duration_s=10, prompt_tokens=256, output_tokens=32)

            loader = threading.Thread(target=load, daemon=True)
            loader.start()
            time.sleep(20)  # a first minute's worth of rates for the observe window
            before = prometheus_requests(prom.url)
            proc = subprocess.Popen(
                [sys.executable, "-m", "controller.reactor.run"],
                cwd=REPO,
                env={**env, "SHIFTLIGHT_BACKEND": "kubernetes", "SHIFTLIGHT_PROMETHEUS_URL": prom.url},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + 900
                while sample(scrape(port), "shiftlight_cycles_total") < cycles_wanted:
                    assert proc.poll() is None, "the operator (kubernetes backend) exited"
                    assert time.monotonic() < deadline, "the kubernetes-backend operator did not run its cycles"
                    time.sleep(1.0)
                cycles = int(sample(scrape(port), "shiftlight_cycles_total"))
                after = prometheus_requests(prom.url)
            finally:
                stop.set()
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    by_handler = {h: after[h] - before[h] for h in sorted(after) if after[h] > before[h]}
    return PrometheusPass(cycles, sum(by_handler.values()), by_handler, time.monotonic() - began)


@dataclass
class Run:
    targets: int
    cycles: int
    decide_p50_ms: float
    decide_p99_ms: float
    decide_cpu_p50_ms: float
    decide_cpu_p99_ms: float
    cycle_p50_ms: float
    cycle_p99_ms: float
    rss: tuple[float, float, float]
    calls: dict[str, float]
    steady_writes: float
    steady_cycles: int
    idle_targets: int
    idle_keys: dict[str, int]
    all_writes: float
    reaction_s: list[float]
    held_after: int
    live_after: int
    never_cycled: int
    wall_s: float
    cycle_s: float
    period_s: float
    prometheus: PrometheusPass | None = None


@dataclass
class Operator:
    """The operator process under test, its metrics port, environment and log."""

    proc: subprocess.Popen[bytes] | None
    port: int
    env: dict[str, str]
    work: Path
    log: Any

    def alive(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, (self.work / "operator.log").read_text()[-3000:]

    def cycles(self) -> float:
        return sample(scrape(self.port), "shiftlight_cycles_total")

    def wait_cycles(self, n: float, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.cycles() < n and time.monotonic() < deadline:
            self.alive()
            assert leading(self.port), "the operator lost its Lease"
            time.sleep(1.0)


def start_operator(work: Path, op_config: Path, time_scale: float) -> Operator:
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(op_config),
        "POD_NAME": "shiftlight-0",
        "POD_NAMESPACE": "shiftlight",
        "SHIFTLIGHT_HEALTH_PORT": str(port),
        "SHIFTLIGHT_METRICS_PORT": str(port),
        "SHIFTLIGHT_POLICY_DIR": str(policy_dir(work)),
        "SHIFTLIGHT_TIME_SCALE": str(time_scale),
        "SHIFTLIGHT_LOG_LEVEL": "error",
        # the fake API server shares these 2 cores with everything else: a renewal answered after the chart's
        # 10 s deadline would hand leadership back mid-run, so the Lease is given more room here
        "SHIFTLIGHT_LEASE_DURATION_SECONDS": "120",
        "SHIFTLIGHT_LEASE_RENEW_DEADLINE_SECONDS": "90",
    }
    log = (work / "operator.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.reactor.run"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    return Operator(proc, port, env, work, log)


def fill_fleet(op: Operator, fleet: Fleet, seed: tuple[str, str], targets: int) -> None:
    """Once the seed TunedService is tuned, create the others (2 % untuned, the rest with its status) and wait
    until the operator holds every one."""

    def steady(status: dict[str, Any]) -> bool:
        return status.get("phase") == "Observing" and bool(status.get("history"))

    deadline = time.monotonic() + 900
    while not steady(fleet.status(seed).get("status") or {}) and time.monotonic() < deadline:
        op.alive()
        time.sleep(0.5)
    tuned = fleet.status(seed).get("status") or {}
    assert steady(tuned), f"the seed TunedService did not settle: {tuned.get('phase')}"
    fresh = max(1, targets // 50)  # 2 % start untuned: trials and rollouts in flight from the start
    for i in range(targets - 1):
        fleet.create(None if i < fresh else tuned)
    deadline = time.monotonic() + 1800
    while sample(scrape(op.port), "shiftlight_tunedservices_held") < len(fleet.live):  # every one seen once
        assert time.monotonic() < deadline, "the operator did not reach every TunedService in 30 minutes"
        assert leading(op.port), "the operator lost its Lease"
        time.sleep(1.0)


def churn(fleet: Fleet, admin: Any, targets: int) -> dict[tuple[str, str], float]:
    """5 % changed (a new generation), 5 % deleted, 5 % created; the seconds until each change was observed."""
    n = max(1, targets // 20)
    keys = list(fleet.live)
    co = client.CustomObjectsApi(admin)
    patched: dict[tuple[str, str], tuple[int, float]] = {}
    for key in keys[:n]:
        body = co.patch_namespaced_custom_object(
            G, V, key[0], "tunedservices", key[1], {"spec": {"replicas": {"minReplicas": 1, "maxReplicas": 6}}}
        )
        patched[key] = (int(body["metadata"]["generation"]), time.monotonic())
    for key in keys[-n:]:
        fleet.delete(key)
    for _ in range(n):
        fleet.create()
    reaction: dict[tuple[str, str], float] = {}
    deadline = time.monotonic() + 600
    while len(reaction) < len(patched) and time.monotonic() < deadline:
        for key, (generation, at) in patched.items():
            if key not in reaction:
                status = fleet.status(key).get("status") or {}
                if status.get("observedGeneration") == generation:
                    reaction[key] = time.monotonic() - at
        time.sleep(0.25)
    return reaction


@dataclass
class IdleWrites:
    """The status writes of TunedServices that were idle through the steady stretch (Observing, no rollout, no
    trial and no spec change): a write there is one "when nothing changed"."""

    targets: int = 0
    writes: int = 0
    keys: Counter[str] = field(default_factory=Counter)
    examples: list[tuple[Any, Any]] = field(default_factory=list)


def idle_writes(kube: KubeAPIServer, fleet: Fleet, steady_rv: int) -> IdleWrites:
    idle = IdleWrites()
    for key in fleet.live:
        versions = kube.api.versions(f"tunedservices.{V}.{G}", *key)
        late = [v for v in versions if int(v["metadata"]["resourceVersion"]) > steady_rv]
        before = [v for v in versions if int(v["metadata"]["resourceVersion"]) <= steady_rv]
        states = [(v.get("status") or {}) for v in before[-1:] + late]
        quiet = all(st.get("phase") == "Observing" and not st.get("rollout") and not running(st) for st in states)
        if states and quiet and len({v["metadata"].get("generation") for v in before[-1:] + late}) == 1:
            idle.targets += 1
            for a, b in itertools.pairwise(states):
                if a != b:
                    idle.writes += 1
                    idle.keys.update(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                    if len(idle.examples) < 3:
                        idle.examples.append((a.get("last_reasons"), b.get("last_reasons")))
    return idle


def print_status_changes(kube: KubeAPIServer, fleet: Fleet) -> None:
    """What changed in each status write of the first TunedServices (``SCALE_DEBUG``)."""
    for key in list(fleet.live)[:3]:
        versions = [v.get("status") or {} for v in kube.api.versions(f"tunedservices.{V}.{G}", *key)]
        for a, b in itertools.pairwise(versions):
            print(key, sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)), b.get("phase"))


def steady_stretch(op: Operator, kube: KubeAPIServer, targets: int, total: float) -> tuple[str, int, float, int]:
    """The steady stretch: no spec changes from here on, at least one cycle per TunedService. The metrics at its
    end, its cycles, the status writes per cycle and the resource version it began at."""
    text = scrape(op.port)
    total = max(total, sample(text, "shiftlight_cycles_total") + max(targets, total / 4))
    steady_from = (sample(text, "shiftlight_cycles_total"), sample(text, "shiftlight_status_writes_total"))
    steady_rv = kube.api.resource_version()
    op.wait_cycles(total, 3600)
    text = scrape(op.port)
    steady_cycles = int(sample(text, "shiftlight_cycles_total") - steady_from[0])
    all_writes = (sample(text, "shiftlight_status_writes_total") - steady_from[1]) / max(steady_cycles, 1)
    return text, steady_cycles, all_writes, steady_rv


def run(targets: int, cycles_per_target: int, namespaces: int, time_scale: float, prometheus_cycles: float) -> Run:
    work = Path(tempfile.mkdtemp(prefix="shiftlight-scale-"))
    kube = KubeAPIServer(KubeAPI(tokens={"t-operator": OPERATOR, "t-admin": "admin"}, keep_requests=1000)).start()
    op: Operator | None = None
    try:
        admin = config.new_client_from_config(str(kube.write_kubeconfig(work / "admin", user="admin", token="t-admin")))
        op_config = kube.write_kubeconfig(work / "operator", user="operator", token="t-operator")
        fleet = Fleet(admin, namespaces)
        seed = fleet.create()  # tuned by the operator first: its status is what a steady TunedService looks like
        began = time.monotonic()
        op = start_operator(work, op_config, time_scale)
        assert op.proc is not None
        pid = op.proc.pid
        fill_fleet(op, fleet, seed, targets)
        seeded_cycles = op.cycles()
        total = seeded_cycles + targets * cycles_per_target
        rss_start = rss_mb(pid)
        counted_from = time.monotonic()
        op.wait_cycles(seeded_cycles + (total - seeded_cycles) / 2, 3600)  # the middle of the counted cycles
        rss_mid = rss_mb(pid)
        reaction = churn(fleet, admin, targets)
        op.wait_cycles(seeded_cycles + (total - seeded_cycles) * 3 / 4, 3600)
        text, steady_cycles, all_writes, steady_rv = steady_stretch(op, kube, targets, total)
        rss_end = rss_mb(pid)
        idle = idle_writes(kube, fleet, steady_rv)
        idle_cycles = steady_cycles * idle.targets / max(len(fleet.live), 1)
        done = sample(text, "shiftlight_cycles_total") - seeded_cycles
        # created without a status (the untuned 2 % and those created mid-run) and still without observedGeneration:
        # never cycled (the others carry the seed's copied status, so this cannot tell for them)
        never_cycled = sum(
            1 for key in fleet.live if "observedGeneration" not in (fleet.status(key).get("status") or {})
        )
        period_s = len(fleet.live) * (time.monotonic() - counted_from) / max(done, 1)
        if os.environ.get("SCALE_DEBUG"):
            print_status_changes(kube, fleet)
        for a, b in idle.examples:
            print(f"        an idle TunedService's status write: last_reasons {a} -> {b}")
        calls = Counter(c.verb for c in kube.api.calls if c.user == OPERATOR)
        wall_s = time.monotonic() - began
        prometheus = None
        if prometheus_cycles > 0:
            stop(op.proc)
            op.proc = None
            live_namespaces = sorted({key[0] for key in fleet.live})
            prometheus = prometheus_pass(
                op.env, op.port, work, live_namespaces, prometheus_cycles * len(fleet.live), op.log
            )
        return Run(
            targets=targets,
            cycles=int(done),
            decide_p50_ms=1000 * quantile(text, "shiftlight_decide_duration_seconds", 0.5),
            decide_p99_ms=1000 * quantile(text, "shiftlight_decide_duration_seconds", 0.99),
            decide_cpu_p50_ms=1000 * quantile(text, "shiftlight_decide_cpu_seconds", 0.5),
            decide_cpu_p99_ms=1000 * quantile(text, "shiftlight_decide_cpu_seconds", 0.99),
            cycle_p50_ms=1000 * quantile(text, "shiftlight_reconcile_duration_seconds", 0.5),
            cycle_p99_ms=1000 * quantile(text, "shiftlight_reconcile_duration_seconds", 0.99),
            rss=(rss_start, rss_mid, rss_end),
            calls={verb: n / max(done, 1) for verb, n in sorted(calls.items())},
            steady_writes=idle.writes / max(idle_cycles, 1),
            steady_cycles=steady_cycles,
            idle_targets=idle.targets,
            idle_keys=dict(idle.keys),
            all_writes=all_writes,
            reaction_s=sorted(reaction.values()),
            held_after=int(sample(text, "shiftlight_tunedservices_held")),
            live_after=len(fleet.live),
            never_cycled=never_cycled,
            wall_s=wall_s,
            cycle_s=cycle_length_s(time_scale),
            period_s=period_s,
            prometheus=prometheus,
        )
    finally:
        if op is not None and op.proc is not None:
            stop(op.proc)
        kube.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--targets", default="10,100,500", help="comma-separated TunedService counts")
    parser.add_argument("--cycles-per-target", type=int, default=4, help="operator cycles to run, per TunedService")
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--time-scale", type=float, default=3000.0, help="simulated seconds per real second")
    parser.add_argument(
        "--prometheus-cycles-per-target",
        type=float,
        default=1.0,
        help="cycles per TunedService of the kubernetes-backend pass against a real Prometheus (0: no pass)",
    )
    args = parser.parse_args(argv)
    runs = []
    print(
        f"{'targets':>7} {'cycles':>7} {'decide p50/p99 ms':>18} {'cycle p50/p99 ms':>16} {'RSS start/mid/end MB':>21} "
        f"{'api calls/cycle':>15} {'steady writes/cycle':>19} {'reaction s (max)':>16} {'held/live':>9} {'wall s':>7}"
    )
    for n in sorted(int(x) for x in args.targets.split(",")):
        r = run(n, args.cycles_per_target, args.namespaces, args.time_scale, args.prometheus_cycles_per_target)
        runs.append(r)
        reaction = f"{statistics.median(r.reaction_s):.1f} ({max(r.reaction_s):.1f})" if r.reaction_s else "n/a"
        print(
            f"{r.targets:>7} {r.cycles:>7} {r.decide_p50_ms:>8.1f}/{r.decide_p99_ms:<9.1f} "
            f"{r.cycle_p50_ms:>7.0f}/{r.cycle_p99_ms:<8.0f} "
            f"{r.rss[0]:>6.0f}/{r.rss[1]:>6.0f}/{r.rss[2]:<7.0f} {sum(r.calls.values()):>15.2f} "
            f"{r.steady_writes:>19.3f} {reaction:>16} {r.held_after:>4}/{r.live_after:<4} {r.wall_s:>7.0f}"
        )
        print(
            f"        decide: wall p50/p99 {r.decide_p50_ms:.1f}/{r.decide_p99_ms:.1f} ms, CPU of its thread p50/p99 "
            f"{r.decide_cpu_p50_ms:.1f}/{r.decide_cpu_p99_ms:.1f} ms (the rest is waiting for the interpreter lock)"
        )
        print("        api calls/cycle by verb: " + ", ".join(f"{v} {x:.2f}" for v, x in r.calls.items()))
        print(
            f"        steady stretch: {r.steady_cycles} cycles, {r.idle_targets} of {r.live_after} TunedServices idle "
            f"(their status writes counted above; fields they changed: {r.idle_keys or 'none'}), all status writes "
            f"{r.all_writes:.3f}/cycle; reactions " + " ".join(f"{x:.1f}" for x in r.reaction_s)
        )
        if r.reaction_s:
            goal = r.cycle_s + REACTION_SLACK_S
            print(
                f"        reaction to a spec change: median {statistics.median(r.reaction_s):.1f} s, slowest "
                f"{max(r.reaction_s):.1f} s; a cycle is the {Plan().requeue_after_s:.0f} s requeue of an Observing "
                f"TunedService at {args.time_scale:g}x, {r.cycle_s:.2f} s, so the goal is {goal:.2f} s: "
                f"{'met' if max(r.reaction_s) <= goal else 'missed'} (each TunedService was cycled every "
                f"{r.period_s:.1f} s on average: the operator's cycles per second spread over {r.live_after})"
            )
        print(
            f"        held/live after the deletions: {r.held_after}/{r.live_after}; {r.never_cycled} live "
            f"TunedService(s) created without a status not cycled yet"
        )
        if r.prometheus is not None:
            p = r.prometheus
            print(
                f"        Prometheus (kubernetes backend, real Prometheus): {p.per_cycle:.2f} queries/target/cycle "
                f"({p.queries} queries over {p.cycles} cycles of {r.live_after} TunedServices, by handler "
                f"{p.by_handler}, {p.wall_s:.0f} s)"
            )
    last = runs[-1]
    reaction = (
        f"reaction median {statistics.median(last.reaction_s):.1f} s, slowest {max(last.reaction_s):.1f} s "
        f"(goal {last.cycle_s + REACTION_SLACK_S:.2f} s)"
        if last.reaction_s
        else "reaction n/a"
    )
    print(
        f"scale: {last.targets} targets, decide p99 {last.decide_p99_ms:.1f} ms (cpu {last.decide_cpu_p99_ms:.1f} ms), "
        f"cycle p99 {last.cycle_p99_ms:.0f} "
        f"ms/target, RSS {last.rss[0]:.0f} -> {last.rss[1]:.0f} -> {last.rss[2]:.0f} MB over {last.cycles} cycles, "
        f"steady writes {last.steady_writes:.2f}/cycle, api calls {sum(last.calls.values()):.2f}/target/cycle, "
        f"{reaction}, held/live {last.held_after}/{last.live_after}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
