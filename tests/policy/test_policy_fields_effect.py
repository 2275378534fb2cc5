"""Every field of the policy schema has an effect on something the control loop uses.

The test walks every leaf field of :class:`~controller.policy.Policy` (recursively through nested models), sets it
to another valid value, and asserts that at least one thing the loop reads changes: the decide layer's rules
(``rules_from_policy``), the search space's configs, constraint violations and memory fit, the lossy check and
approval, the trial budget (``budget_left`` and the trial request the act step builds), or the advisor (its prior,
the chat model's settings, and a run of the agent with a scripted model). A field that reaches nothing fails the
test with its name.
"""

from __future__ import annotations

import itertools
import json
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from controller.act import ActContext
from controller.act.trials import run_trial
from controller.advisor.chat import make_chat_model
from controller.advisor.endpoints import AdvisorEndpoint
from controller.advisor.graph import AgentAdvisor
from controller.advisor.priors import policy_prior
from controller.advisor.scripted import ScriptedChatModel
from controller.clock import FakeClock
from controller.decide import Rules
from controller.decide.search.guardrails import budget_left
from controller.domain import STOCK, EngineConfig, LengthDistribution, TrafficShape
from controller.domain.actions import RunTrial
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext
from controller.domain.slo import SLO
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from controller.policy import Policy, profile_feasibility
from controller.ports import TrialRequest
from controller.reconcile import Ports, Reconciler
from controller.trials.verdict.quality import quality_gate_for

#: Metadata: fields that name or describe a policy and are meant to change nothing.
EXEMPT = {
    "version": "the schema version: it selects how the file is parsed, only one exists",
    "name": "a label for people (status, events); it must not change a decision",
    "description": "free text for people",
}

#: Fields that reach nothing yet, each with why. The test also fails when one of these starts to have an effect,
#: so the entry is removed when it is fixed.
#: Fields that reach nothing yet, with why (each must say what would consume it). Empty: every field has an effect.
NOT_YET_CONSUMED: dict[str, str] = {}

TARGET = TargetRef("prod", "chat", "llama")
SHAPE = TrafficShape(
    arrival_rate_rps=20,
    concurrency=256,
    prompt_tokens=LengthDistribution(mean=512),
    output_tokens=LengthDistribution(mean=512),
)
ENDPOINTS = (
    AdvisorEndpoint(name="default", base_url="http://127.0.0.1:9/v1", model="m-default"),
    AdvisorEndpoint(name="other", base_url="http://127.0.0.1:9/v1", model="m-other"),
)
#: A target with every trait known, so every constraint can fire (hopper: not blackwell; dense; no MTP head).
RICH_TARGET = {"gpu_family": "hopper", "hybrid": False, "has_mtp": False, "gpus": 1, "gpu_memory_gib": 141}
#: A known simulator profile pair: a memory-fit oracle and an advisor prior are attached.
PROFILED_TARGET = {"model": "llama-3.1-8b", "gpu": "h200"}


def _cfg(**knobs: Any) -> EngineConfig:
    return EngineConfig(**knobs)


#: Configs each constraint, the lossy rules and the memory fit look at.
PROBES = (
    STOCK,
    _cfg(speculative_method="ngram", num_speculative_tokens=3, async_scheduling=False),
    _cfg(mamba_ssm_cache_dtype="float16", mamba_cache_stochastic_rounding=True, mamba_backend="triton"),
    _cfg(max_num_seqs=256, max_cudagraph_capture_size=64),
    _cfg(max_num_seqs=256, max_num_batched_tokens=128),
    _cfg(speculative_method="mtp", num_speculative_tokens=1),
    _cfg(speculative_method="mtp", num_speculative_tokens=7, async_scheduling=True),
    _cfg(mamba_ssm_cache_dtype="float32"),
    _cfg(tensor_parallel_size=2),
    _cfg(kv_cache_dtype="fp8", max_num_seqs=4096, max_num_batched_tokens=65536, gpu_memory_utilization=0.3),
    _cfg(enable_prefix_caching=False, async_scheduling=True),
)

#: Where a field only matters in a setting, the base policy it is changed in (longest matching prefix wins).
CONTEXT: dict[str, dict[str, Any]] = {
    "constraints.": {"target": RICH_TARGET},
    "constraints.memory_fit": {"target": {**RICH_TARGET, **PROFILED_TARGET}},
    "target.": {"target": RICH_TARGET},
    "target.model": {"target": {**RICH_TARGET, **PROFILED_TARGET}},
    "target.gpu": {"target": {**RICH_TARGET, **PROFILED_TARGET}},
    "trial_budget.": {"trial_budget": {"max_trials": 1000}},
    "llm.": {"llm": {"enabled": True}},
    "overrides": {"target": RICH_TARGET},
}

#: Alternatives where a generic one (flip a bool, another literal, a nearby number) is not valid or not telling.
ALTERNATIVES: dict[str, Any] = {
    "target.model": "nemotron-3-super-fp8",
    "target.gpu": "rtx-3090",
    "target.gpu_family": "blackwell",
    "target.hybrid": True,
    "target.has_mtp": True,
    "target.gpu_memory_gib": 24.0,
    "target.gpus": 2,
    "overrides": [{"when": {"gpu_family": ["hopper"]}, "space": {"max_num_seqs": [64, 128]}}],
    "quality_gate.lossy": [{"knob": "enable_prefix_caching", "values": [False], "reason": "test"}],
    "rollout.steps": [10, 100],
    "llm.advisor": "other",
    "llm.token_budget": 10,
    "llm.max_tokens": 32768,
    "llm.max_rejected_rounds": 2,
    "approval": "manual",
    "space.speculative_method": ["none", "mtp"],
    "space.num_speculative_tokens": [1, 2],
    "space.prompt_lookup_max": [4, 8],
    "space.async_scheduling": [True, False],
    "space.mamba_ssm_cache_dtype": ["float32", "float16"],
    "space.mamba_cache_stochastic_rounding": [False, True],
    "space.mamba_cache_philox_rounds": [None, 4],
    "space.mamba_backend": ["triton", "flashinfer"],
    "space.max_num_seqs": [128, 256],
    "space.max_num_batched_tokens": [4096, 8192],
    "space.kv_cache_dtype": ["auto", "fp8"],
    "space.enable_prefix_caching": [True, False],
    "space.max_cudagraph_capture_size": [None, 2048],
    "space.gpu_memory_utilization": [0.8, 0.9],
    "space.tensor_parallel_size": [1, 2],
    "space.omp_num_threads": [None, 8],
    "trial_budget.max_trials": 999,
    "space.base.async_scheduling": True,
    "space.base.enable_prefix_caching": False,
    "space.base.mamba_backend": "flashinfer",
    "space.base.speculative_method": "mtp",
    "space.base.num_speculative_tokens": 0,
    "space.base.prompt_lookup_max": None,
    "space.base.mamba_ssm_cache_dtype": "float32",
    "space.base.mamba_cache_stochastic_rounding": False,
    "space.base.mamba_cache_philox_rounds": None,
    "space.base.max_num_seqs": 512,
    "space.base.max_num_batched_tokens": 8192,
    "space.base.max_cudagraph_capture_size": 4096,
    "space.base.gpu_memory_utilization": 0.85,
    "space.base.omp_num_threads": 8,
}
#: Fields changed together with their alternative (a single change would be invalid).
COMPANIONS: dict[str, dict[str, Any]] = {
    "space.base.speculative_method": {"space.base.num_speculative_tokens": 1},
    "space.base.num_speculative_tokens": {
        "trial_budget.max_trials": 999,
        "space.base.async_scheduling": True,
        "space.base.enable_prefix_caching": False,
        "space.base.mamba_backend": "flashinfer",
        "space.base.speculative_method": "mtp",
        "space.base.num_speculative_tokens": 2,
    },
    "space.base.prompt_lookup_max": {
        "space.base.speculative_method": "ngram",
        "space.base.num_speculative_tokens": 3,
        "space.base.prompt_lookup_max": 4,
    },
    "space.base.mamba_cache_stochastic_rounding": {
        "space.base.mamba_ssm_cache_dtype": "float16",
        "space.base.mamba_cache_stochastic_rounding": True,
    },
    "space.base.mamba_cache_philox_rounds": {
        "space.base.mamba_ssm_cache_dtype": "float16",
        "space.base.mamba_cache_stochastic_rounding": True,
        "space.base.mamba_cache_philox_rounds": 4,
    },
}


# ----- the walk ---------------------------------------------------------------------------------------------------


def _model(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def leaves(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted path, field info)`` for every leaf field, recursing into fields whose type is a model."""
    for name, info in model.model_fields.items():
        path = prefix + name
        sub = _model(info.annotation)
        if sub is not None:
            yield from leaves(sub, path + ".")
        else:
            yield path, info


LEAVES = dict(leaves(Policy))


def generic_alternative(path: str, info: Any, current: Any) -> Any:
    annotation = info.annotation
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal and len(args) > 1:
        return next(a for a in args if a != current)
    if isinstance(current, bool):
        return not current
    if isinstance(current, int):
        return current + 1
    if isinstance(current, float):
        return round(current * 0.5, 6) if current else 0.5
    raise AssertionError(f"{path}: no generic alternative for {current!r}: add one to ALTERNATIVES")


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value


def get_path(policy: Policy, path: str) -> Any:
    value: Any = policy
    for p in path.split("."):
        value = getattr(value, p)
    return value


def context_for(path: str) -> dict[str, Any]:
    matches = [k for k in CONTEXT if path == k or (k.endswith(".") and path.startswith(k))]
    return json.loads(json.dumps(CONTEXT[max(matches, key=len)])) if matches else {}


# ----- what the loop uses -----------------------------------------------------------------------------------------


class RecordingLoadTester:
    def __init__(self) -> None:
        self.requests: list[TrialRequest] = []

    def run(self, request: TrialRequest) -> TrialResult:
        self.requests.append(request)
        return TrialResult(
            config=request.config, shape=request.shape, slo=request.slo, status=TrialStatus.FAILED, reason="test"
        )


class Nothing:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the trial step used {name}")


def trial_request(policy: Policy) -> TrialRequest:
    """The trial request the act step builds for a RunTrial under ``policy``."""
    tester = RecordingLoadTester()
    ports = Ports(
        metrics=Nothing(),  # type: ignore[arg-type]
        load_tester=tester,
        router=Nothing(),  # type: ignore[arg-type]
        advisor=Nothing(),  # type: ignore[arg-type]
        notifier=Nothing(),  # type: ignore[arg-type]
        cluster=Nothing(),  # type: ignore[arg-type]
        clock=FakeClock(),
    )
    executor = Reconciler(ports, Rules.from_policy(policy)).executor
    run_trial(RunTrial(STOCK, SHAPE, "probe"), ActContext(TARGET, executor.ports, executor.trial_settings))
    (request,) = tester.requests
    return request


OUT_OF_POLICY = json.dumps(
    {
        "action": "propose",
        "hypothesis": "more slots",
        "proposals": [{"base": "active", "changes": {"max_num_seqs": 99999}, "rationale": "x"}],
    }
)


def agent_run(policy: Policy) -> tuple[Any, ...]:
    """A run of the LLM agent with a scripted model that keeps proposing an out-of-policy config."""
    if not policy.llm.enabled:
        return ("disabled",)
    model = ScriptedChatModel(script=[OUT_OF_POLICY])
    ctx = AdvisorContext(TARGET, SHAPE, policy.slo, STOCK, (), 1)
    result = AgentAdvisor(policy, chat_model=model).advise(ctx)
    return (result.fallback_reason, len(model.calls), result.tokens_used)


def history(policy: Policy) -> tuple[TrialResult, ...]:
    pct = Percentiles(p50=0.1, p95=0.2, p99=0.3)
    return tuple(
        TrialResult(
            config=STOCK, shape=SHAPE, slo=SLO(), status=TrialStatus.MEASURED, ttft_s=pct, tpot_s=pct, duration_s=300
        )
        for _ in range(3)
    )


def effects(policy: Policy) -> dict[str, Any]:
    """Everything the loop reads from a policy, as comparable values."""
    policy = policy.with_feasibility(profile_feasibility(policy))
    prior = policy_prior(policy)
    llm = policy.llm
    endpoint = next((e for e in ENDPOINTS if e.name == llm.advisor), ENDPOINTS[0])
    chat = make_chat_model(endpoint, llm)
    gate = quality_gate_for(policy, "http://127.0.0.1:9", "stable")
    return {
        "rules": repr(Rules.from_policy(policy)),
        "space": (
            policy.space.product_size(),
            tuple(c.key() for c in itertools.islice(policy.space.configs(policy.feasibility), 512)),
        ),
        "violations": tuple(tuple(policy.constraint_violations(c)) for c in PROBES),
        "in_policy": tuple(tuple(policy.validate_config(c)) for c in PROBES),
        "lossy": tuple((tuple(policy.lossy_reasons(c)), policy.needs_approval(c)) for c in PROBES),
        "budget_left": (
            budget_left(Rules.from_policy(policy).tuning, ()),
            budget_left(Rules.from_policy(policy).tuning, history(policy)),
        ),
        "scaling": repr(Rules.from_policy(policy, replicas=(1, 8)).scaling),
        "trial_request": trial_request(policy).budget,
        "prior": None if prior is None else tuple(round(prior(c, SHAPE), 6) for c in PROBES[:3]),
        "advisor": (llm.enabled, endpoint.name, chat.request_timeout, chat.max_tokens, chat.temperature),
        "quality_gate": (gate.min_exact_match, gate.max_logprob_divergence, tuple(map(tuple, gate.prompts))),
        "agent": agent_run(policy),
    }


def test_the_walk_sees_every_section() -> None:
    sections = {path.split(".")[0] for path in LEAVES}
    assert sections == set(Policy.model_fields)
    assert "rollout.thresholds.min_goodput_ratio" in LEAVES and "space.base.max_num_seqs" in LEAVES


@pytest.mark.parametrize("path", sorted(set(LEAVES) - set(EXEMPT)))
def test_every_policy_field_changes_something_the_loop_uses(path: str) -> None:
    base_data = context_for(path)
    base = Policy.model_validate(base_data)
    changed_data = json.loads(json.dumps(base_data))
    if path in COMPANIONS:
        for other, value in COMPANIONS[path].items():
            set_path(changed_data, other, value)
    if path not in COMPANIONS or path not in COMPANIONS[path]:
        value = (
            ALTERNATIVES[path]
            if path in ALTERNATIVES
            else generic_alternative(path, LEAVES[path], get_path(base, path))
        )
        set_path(changed_data, path, value)
    try:
        changed = Policy.model_validate(changed_data)
    except ValidationError as exc:
        raise AssertionError(f"{path}: the alternative is not valid, fix ALTERNATIVES: {exc}") from exc
    assert get_path(changed, path) != get_path(base, path) or path in COMPANIONS, f"{path}: the change did not apply"
    before, after = effects(base), effects(changed)
    moved = sorted(k for k in before if before[k] != after[k])
    if path in NOT_YET_CONSUMED:
        assert not moved, f"{path} now changes {moved}: remove it from NOT_YET_CONSUMED"
    else:
        assert moved, f"policy field {path} reaches nothing the loop uses"
