"""The approver sees the evidence in Slack: the operator's approval request carries the candidate's exact
``vllm serve`` flags and their diff against the active config, the knobs that make it lossy and the quality gate's
measured result, and the trials under their Trial CR names; a decision carries its GPU-hours against stock and,
priced by the admin's GPU-hour price or the GPU profile's list price, their cost.

Driven through the reconciler (in-memory cluster and router, a recording notifier), then rendered by the Slack
formatter as the webhook would post it. Assertions are on flags, codes and names."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from controller.adapters.kube.crs import trial_name_for
from controller.adapters.notify import slack_format as fmt
from controller.clock import FakeClock
from controller.crd.models import TunedServiceSpec, parse_tuned_service
from controller.decide import Rules, TuningRules
from controller.domain import evidence
from controller.domain.actions import Notify, RequestApproval, Severity
from controller.domain.codes import Code
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig, TargetStatus, TuningRound
from controller.domain.traffic import TimeWindow
from controller.domain.trial import Percentiles, QualityReport, TrialResult, TrialStatus
from controller.policy import Policy
from controller.reactor.gpu_price import gpu_price
from controller.reactor.settings import OperatorSettings
from controller.reconcile import Reconciler
from controller.simulator.profiles import load_gpu
from tests.support.rollout_fakes import MTP1, NOW, SHAPE, TARGET, mid_rollout_ports, rolling

#: MTP1 with an fp8 KV cache: lossy under the default quality gate.
LOSSY = EngineConfig(speculative_method="mtp", num_speculative_tokens=1, kv_cache_dtype="fp8")


def measured(config: EngineConfig, goodput: float, quality: QualityReport | None = None) -> TrialResult:
    return TrialResult(
        config=config,
        shape=SHAPE,
        slo=SLO(),
        status=TrialStatus.MEASURED,
        goodput_tokens_per_s=goodput,
        output_tokens_per_s=goodput * 1.1,
        ttft_s=Percentiles(p50=0.2, p95=0.4, p99=0.6),
        tpot_s=Percentiles(p50=0.02, p95=0.03, p99=0.04),
        completed=100,
        quality=quality,
    )


PASSED = QualityReport(exact_match_rate=0.97, mean_logprob_divergence=0.012, prompts=64, passed=True)


def text_of(message: dict[str, object]) -> str:
    blocks = message["blocks"]
    assert isinstance(blocks, list)
    return "\n".join(str(b.get("text", {}).get("text", "")) for b in blocks if isinstance(b.get("text"), dict))


def test_the_operators_approval_request_carries_flags_diff_lossy_knobs_quality_and_trial_names() -> None:
    clock = FakeClock(NOW)
    ports = mid_rollout_ports(clock)
    ports.cluster.deploy(TARGET, "candidate", LOSSY, 1)
    status = rolling()
    assert status.rollout is not None
    rollout = status.rollout.model_copy(
        update={"to_config": LOSSY, "step_started_at": NOW - timedelta(hours=2)}  # baked: the next step is due
    )
    status = status.model_copy(
        update={"rollout": rollout, "trials": (measured(STOCK, 900.0), measured(LOSSY, 1458.0, PASSED))}
    )
    policy = Policy()
    rules = Rules.from_policy(policy, ())
    rules = replace(rules, rollout=replace(rules.rollout, manual_gates=(2,)))  # a human before 50 %
    result = Reconciler(ports, rules).reconcile(TARGET, status)
    assert result.status.phase is Phase.AWAITING_APPROVAL
    (asked,) = [n for _, n in ports.notifier.posted if n.code == Code.MANUAL_GATE]  # type: ignore[attr-defined]
    fields = dict(asked.fields)
    assert fields[evidence.SERVE] == " ".join(LOSSY.vllm_args())
    assert "--kv-cache-dtype fp8" in fields[evidence.SERVE]
    assert fields[evidence.DIFF].splitlines() == [
        '+ --speculative-config {"method":"mtp","num_speculative_tokens":1}',
        "+ --kv-cache-dtype fp8",
    ]
    assert fields[evidence.LOSSY] == "fp8 KV cache"
    assert fields[evidence.QUALITY].startswith("passed: exact match 97.0%")
    candidate_trial = trial_name_for(TARGET.name, LOSSY, SHAPE)  # the Trial CR's name
    assert fields[evidence.TRIALS].splitlines()[0].startswith(f"{candidate_trial} {LOSSY.label()}: goodput 1,458")

    message = fmt.build_message(TARGET, asked)
    text = text_of(message)
    assert fmt.classify(asked) is fmt.Kind.APPROVAL
    assert "shiftctl approve chat -n team-a" in text
    assert "--kv-cache-dtype fp8" in text and "+ --kv-cache-dtype fp8" in text
    assert "*Lossy knobs:* fp8 KV cache" in text
    assert "*Quality gate:* passed" in text
    assert candidate_trial in text
    assert "```\n" in text  # flags, diff and trials in code blocks, one per line


def test_a_lossless_candidate_says_no_lossy_knob_and_no_gate_needed() -> None:
    rollout = rolling().rollout
    assert rollout is not None
    status = TargetStatus(
        phase=Phase.AWAITING_APPROVAL, rollout=rollout, trials=(measured(rollout.to_config, 1000.0),), replicas=4
    )
    shown = evidence.approval_evidence(TARGET.name, status, lossy_reasons=Policy().lossy_reasons)
    assert shown is not None
    assert (shown.lossy, shown.quality) == ((), "not-needed")
    lossy = status.model_copy(update={"rollout": rollout.model_copy(update={"to_config": LOSSY})})
    unchecked = evidence.approval_evidence(TARGET.name, lossy, lossy_reasons=Policy().lossy_reasons)
    assert unchecked is not None and unchecked.quality == "not-run"  # lossy, and no quality report in status


def test_the_decision_message_carries_gpu_hours_against_stock() -> None:
    rollout = rolling().rollout
    assert rollout is not None
    entry = ScheduledConfig(
        window="day", config=rollout.to_config, shape=SHAPE, goodput_tokens_per_s=1500.0,
        stock_goodput_tokens_per_s=1000.0, replicas=4,
    )  # fmt: skip
    status = TargetStatus(phase=Phase.ROLLING_OUT, rollout=rollout, schedule=(entry,), replicas=4)
    chosen = Notify(Severity.INFO, "New config chosen", "mtp1 delivers 1.5x", (("config", "mtp1"),))
    (annotated,) = evidence.annotate(
        (chosen,), service="chat", status=status, lossy_reasons=Policy().lossy_reasons,
        windows=(TimeWindow(name="day", start_hour=8, end_hour=20),),
    )  # fmt: skip
    assert isinstance(annotated, Notify)
    # 4 replicas x 12 h = 48 GPU-hours on the chosen config; stock needs 1.5x the GPUs for the same goodput
    assert ("GPU-hours per 'day' window", "72.0 → 48.0") in annotated.fields
    text = text_of(fmt.build_message(TARGET, annotated))
    assert "GPU-hours per 'day' window" in text and "72.0" in text and "48.0" in text


def test_only_the_notification_that_follows_an_approval_request_gets_the_evidence() -> None:
    rollout = rolling().rollout
    assert rollout is not None
    status = TargetStatus(phase=Phase.AWAITING_APPROVAL, rollout=rollout, replicas=4)
    step = Notify(Severity.INFO, "Rollout at 25%", "x")
    asked = Notify(Severity.WARNING, "Approval needed", "y", code=Code.APPROVAL_REQUIRED)
    out = evidence.annotate(
        (step, RequestApproval(rollout.id, 0, "y"), asked), service="chat", status=status,
        lossy_reasons=Policy().lossy_reasons,
    )  # fmt: skip
    assert out[0] == step
    assert isinstance(out[2], Notify) and evidence.SERVE in dict(out[2].fields)


DAY_WINDOWS = (TimeWindow(name="night", start_hour=0, end_hour=8), TimeWindow(name="day", start_hour=8, end_hour=24))


def decided(gpu_price: evidence.GpuPrice | None) -> Notify:
    """A tuning round for the day window whose trials are all measured, reconciled: the operator's "New config
    chosen" message (MTP1, 1.5x stock's goodput, on 4 replicas)."""
    trials = (measured(STOCK, 1000.0), measured(MTP1, 1500.0))
    round_ = TuningRound(
        id="day-r1", window="day", shape=SHAPE, started_at=NOW - timedelta(minutes=30), reason="drift",
        trial_keys=tuple(t.config.key() for t in trials), trial_proposers=("baseline", "optimizer"),
        trial_reasons=("baseline", "mtp"),
    )  # fmt: skip
    status = TargetStatus(phase=Phase.TRIALLING, window="day", trials=trials, tuning=round_, replicas=4)
    ports = mid_rollout_ports(FakeClock(NOW))
    rules = Rules(tuning=TuningRules(max_trials=2, min_gain=1.03, approval="manual"), windows=DAY_WINDOWS)
    reconciler = Reconciler(ports, rules, gpu_price=gpu_price)
    reconciler.reconcile(TARGET, status)
    posted = [n for _, n in ports.notifier.posted if n.title == "New config chosen"]  # type: ignore[attr-defined]
    assert len(posted) == 1
    return posted[0]


def test_the_decision_message_carries_the_cost_at_the_admins_gpu_hour_price() -> None:
    settings = OperatorSettings.from_env({"SHIFTLIGHT_GPU_HOUR_USD": "2.5"})
    price = gpu_price(spec_on("H200-141GB"), settings)  # the admin's price wins over the profile's
    decision = decided(price)
    # 4 replicas x 16 h = 64 GPU-hours on MTP1; stock needs 1.5x for the same goodput: 96. At $2.50: $240 -> $160
    assert ("GPU-hours per 'day' window", "96.0 → 64.0") in decision.fields
    assert ("Cost per 'day' window", "$240.00 → $160.00") in decision.fields
    assert (evidence.GPU_PRICE, "$2.50/GPU-hour, chart cost.gpuHourUsd") in decision.fields
    message = fmt.build_message(TARGET, decision)
    _, rows, _ = fmt.split_fields(decision.fields)  # stock and chosen side by side in the evidence table
    assert fmt.EvidenceRow("Cost per 'day' window", "$240.00", "$160.00") in rows
    assert fmt.EvidenceRow("GPU-hours per 'day' window", "96.0", "64.0") in rows
    text = text_of(message)
    assert "$240.00  $160.00" in text and "$2.50/GPU-hour, chart cost.gpuHourUsd" in json.dumps(message)


def test_without_a_price_the_cost_is_at_the_gpu_profiles_list_price() -> None:
    listed = load_gpu("h200").cost_per_hour_usd
    price = gpu_price(spec_on("H200-141GB"), OperatorSettings.from_env({}))
    decision = decided(price)
    fields = dict(decision.fields)
    assert fields["Cost per 'day' window"] == f"${96 * listed:,.2f} → ${64 * listed:,.2f}"
    assert fields[evidence.GPU_PRICE] == f"${listed:,.2f}/GPU-hour, list price of the h200 profile"
    assert "list price of the h200 profile" in json.dumps(fmt.build_message(TARGET, decision))


def test_with_no_price_and_no_profile_for_the_gpu_the_decision_shows_gpu_hours_only() -> None:
    assert gpu_price(spec_on("MI300X"), OperatorSettings.from_env({})) is None
    fields = dict(decided(None).fields)
    assert fields["GPU-hours per 'day' window"] == "96.0 → 64.0"
    assert not any(label.startswith(evidence.COST) for label in fields) and evidence.GPU_PRICE not in fields


def spec_on(gpu_type: str) -> TunedServiceSpec:
    body = {
        "apiVersion": "shiftlight.dev/v1alpha1",
        "kind": "TunedService",
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": {
            "workload": {"deployments": ["chat"], "service": "chat"},
            "model": {"name": "nemotron-3-super-nvfp4"},
            "gpuType": gpu_type,
        },
    }
    parsed, _ = parse_tuned_service(body)
    return parsed
