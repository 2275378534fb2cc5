"""Fault-injecting port wrappers for testing an integration with the operator: ports that fail the way real
systems do, and an operator "restart".

Each wrapper wraps a real or simulated adapter and passes everything else through:

* :class:`FaultyLoadTester`: chosen trials come back ``infeasible`` (engine crash, CUDA OOM, startup timeout) or
  ``failed`` (the canary pool is gone), with the reason and the log tail a real launcher would report;
* :class:`ConflictingCluster` / :class:`ConflictingRouter`: every write raises
  :class:`~controller.errors.ClusterConflict` (HTTP 409) while a shared :class:`ConflictBudget` lasts;
* :class:`UnavailableAdvisor` (raises :class:`~controller.errors.AdvisorUnavailable`) and :class:`GarbageAdvisor`
  (out-of-policy, infeasible and duplicate proposals);
* :func:`restart_operator`: the status goes through its JSON wire form and a fresh Reconciler is built, as when
  the operator's pod is killed between two cycles.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.status import TargetStatus
from controller.domain.trial import TrialResult, TrialStatus
from controller.errors import AdvisorUnavailable, ClusterConflict
from controller.ports import Cluster, LoadTester, TrafficRouter, TrialRequest
from controller.reconcile import Reconciler

__all__ = [
    "IN_POLICY",
    "CanaryFailure",
    "ConflictBudget",
    "ConflictingCluster",
    "ConflictingRouter",
    "FailurePlan",
    "FaultyLoadTester",
    "GarbageAdvisor",
    "UnavailableAdvisor",
    "canary_failure_result",
    "fail_always",
    "fail_calls",
    "garbage_configs",
    "restart_operator",
    "wire_roundtrip",
]


# ----- load tester ---------------------------------------------------------------------------------------------------
class CanaryFailure(StrEnum):
    CRASH = "crash"
    OOM = "oom"
    STARTUP_TIMEOUT = "startup-timeout"
    NODE_GONE = "canary-node-gone"


def canary_failure_result(request: TrialRequest, failure: CanaryFailure) -> TrialResult:
    """The TrialResult a real launcher reports when the canary fails this way (reason and vLLM-like log tail)."""
    cfg = request.config
    timeout = request.budget.startup_timeout_s
    status = TrialStatus.INFEASIBLE
    if failure is CanaryFailure.CRASH:
        reason = "engine crashed: EngineCore exited with code -11 (SIGSEGV) during CUDA graph capture"
        tail: tuple[str, ...] = (
            "INFO [gpu_model_runner.py] Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 61%",
            "ERROR [core.py] EngineCore encountered a fatal error.",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "ERROR [core_client.py] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
        )
        startup = 95.0
    elif failure is CanaryFailure.OOM:
        reason = "out of memory: CUDA OOM while profiling the KV cache (torch.OutOfMemoryError)"
        tail = (
            "INFO [gpu_worker.py] Memory profiling takes 31.2 seconds",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 251.50 GiB of which 1.12 GiB is free.",
            "RuntimeError: Engine core initialization failed. See root cause above.",
        )
        startup = 60.0
    elif failure is CanaryFailure.STARTUP_TIMEOUT:
        reason = f"startup timeout: /health not ready after {timeout:g} s"
        tail = (
            "INFO [backends.py] Using cache directory for torch.compile",
            f"INFO [gpu_model_runner.py] Capturing CUDA graphs (decode, FULL): 12% ({cfg.label()})",
            f"shiftlight: killed the canary after {timeout:g} s without a ready /health",
        )
        startup = timeout
    else:
        status = TrialStatus.FAILED
        reason = (
            "canary pool unavailable: 0/3 nodes match nodeSelector shiftlight.dev/pool=canary "
            "(node canary-0 NotReady); trials paused until the pool is back"
        )
        tail = ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",)
        startup = 0.0
    return TrialResult(
        config=cfg,
        shape=request.shape,
        slo=request.slo,
        status=status,
        reason=reason,
        source="kubernetes",
        startup_s=startup,
        log_tail=tail,
    )


FailurePlan = Callable[[int, TrialRequest], CanaryFailure | None]


def fail_calls(failures: dict[int, CanaryFailure]) -> FailurePlan:
    """Fail the n-th trial (0-based call index) with the given failure; the others run."""
    return lambda n, _req: failures.get(n)


def fail_always(failure: CanaryFailure) -> FailurePlan:
    return lambda _n, _req: failure


class FaultyLoadTester:
    """A LoadTester whose chosen trials fail like a real canary would. ``plan(call_index, request)`` says which."""

    def __init__(self, inner: LoadTester, plan: FailurePlan) -> None:
        self.inner = inner
        self.plan = plan
        self.calls: list[tuple[TrialRequest, CanaryFailure | None]] = []

    def run(self, request: TrialRequest) -> TrialResult:
        failure = self.plan(len(self.calls), request)
        self.calls.append((request, failure))
        if failure is None:
            return self.inner.run(request)
        return canary_failure_result(request, failure)


# ----- cluster and router ------------------------------------------------------------------------------------------
@dataclass
class ConflictBudget:
    """How many more writes fail with HTTP 409 (shared by the cluster and the router wrappers)."""

    remaining: int = 0
    raised: list[str] = field(default_factory=list)

    def check(self, what: str) -> None:
        if self.remaining > 0:
            self.remaining -= 1
            self.raised.append(what)
            raise ClusterConflict(
                f"409 Conflict on {what}: the object has been modified; please apply your changes to the latest "
                "version and try again",
                delay_s=5.0,
            )


class ConflictingCluster:
    """A Cluster whose writes (deploy, scale, retire, promote and, with ``events``, Events) raise 409 while the
    budget lasts. Reads pass through."""

    def __init__(self, inner: Cluster, budget: ConflictBudget, *, events: bool = True) -> None:
        self.inner = inner
        self.budget = budget
        self.events = events

    def deploy(self, target: TargetRef, variant: str, config: EngineConfig, replicas: int) -> None:
        self.budget.check(f"deploy {variant}")
        self.inner.deploy(target, variant, config, replicas)

    def scale(self, target: TargetRef, variant: str, replicas: int) -> None:
        self.budget.check(f"scale {variant}")
        self.inner.scale(target, variant, replicas)

    def retire(self, target: TargetRef, variant: str) -> None:
        self.budget.check(f"retire {variant}")
        self.inner.retire(target, variant)

    def promote(self, target: TargetRef) -> None:
        self.budget.check("promote")
        self.inner.promote(target)

    def ready_replicas(self, target: TargetRef, variant: str) -> int:
        return self.inner.ready_replicas(target, variant)

    def external_autoscaler(self, target: TargetRef) -> str | None:
        return self.inner.external_autoscaler(target)

    def record_event(
        self, target: TargetRef, reason: str, message: str, *, warning: bool = False, action: str = ""
    ) -> None:
        if self.events:
            self.budget.check(f"event {action or reason}")
        self.inner.record_event(target, reason, message, warning=warning, action=action)


class ConflictingRouter:
    """A TrafficRouter whose ``set_weight`` raises 409 while the budget lasts."""

    def __init__(self, inner: TrafficRouter, budget: ConflictBudget) -> None:
        self.inner = inner
        self.budget = budget

    def get_weight(self, target: TargetRef) -> int:
        return self.inner.get_weight(target)

    def set_weight(self, target: TargetRef, candidate_weight: int) -> None:
        self.budget.check(f"route weight {candidate_weight}")
        self.inner.set_weight(target, candidate_weight)


# ----- advisors ------------------------------------------------------------------------------------------------------
class UnavailableAdvisor:
    """An advisor whose endpoint is down: every call raises :class:`AdvisorUnavailable`."""

    def __init__(self, reason: str = "LLM endpoint http://127.0.0.1:8000/v1 refused the connection") -> None:
        self.reason = reason
        self.calls = 0

    def propose(self, context: AdvisorContext) -> Sequence[Proposal]:
        self.calls += 1
        raise AdvisorUnavailable(self.reason, delay_s=30.0)


#: A config inside the hybrid-MTP workstation policy's space, the base the garbage is made from.
IN_POLICY = EngineConfig(
    speculative_method="mtp",
    num_speculative_tokens=1,
    async_scheduling=True,
    mamba_ssm_cache_dtype="float32",
    mamba_backend="flashinfer",
    max_num_seqs=256,
    max_num_batched_tokens=8192,
)


def garbage_configs(active: EngineConfig, base: EngineConfig = IN_POLICY) -> list[EngineConfig]:
    """Configs an advisor must never get trialled: out of policy, infeasible together, or the active one."""
    return [
        base.model_copy(update={"max_num_seqs": 7}),  # not an allowed value
        base.model_copy(update={"tensor_parallel_size": 8}),  # a knob the policy does not tune
        base.model_copy(update={"kv_cache_dtype": "fp8"}),  # lossy and fixed by the policy
        # every knob in policy, but CUDA graphs of 1024 cannot cover max_num_seqs 512 x (1 + 3)
        base.model_copy(update={"num_speculative_tokens": 3, "max_num_seqs": 512, "max_cudagraph_capture_size": 1024}),
        active,  # a duplicate
    ]


class GarbageAdvisor:
    """An advisor answering with configs the guardrails must refuse (see :func:`garbage_configs`)."""

    def __init__(self) -> None:
        self.calls = 0
        self.proposed: list[EngineConfig] = []

    def propose(self, context: AdvisorContext) -> Sequence[Proposal]:
        self.calls += 1
        configs = garbage_configs(context.active)
        self.proposed += configs
        return [Proposal(c, "trust me", "agent") for c in configs]


# ----- restarts ------------------------------------------------------------------------------------------------------
def wire_roundtrip(status: TargetStatus) -> TargetStatus:
    """The status as a restarted operator reads it back from the CR: JSON text and validation."""
    text = json.dumps(status.model_dump(mode="json"))
    return TargetStatus.model_validate(json.loads(text))


def restart_operator(status: TargetStatus, build: Callable[[], Reconciler]) -> tuple[Reconciler, TargetStatus]:
    """Kill the operator between two cycles: only the persisted status survives, a fresh Reconciler takes over."""
    return build(), wire_roundtrip(status)
