"""Pure Block Kit builders: kinds, evidence table, escaping, Block Kit limits."""

from __future__ import annotations

from datetime import UTC, date, datetime

from controller.adapters.notify import slack_format as fmt
from controller.domain.actions import Notify, Severity
from controller.domain.codes import Code
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.rollout import RolloutState
from controller.domain.slo import SLO
from controller.domain.status import TargetStatus
from controller.domain.trial import TrialResult
from tests.support import builders
from tests.support.builders import shape

TARGET = TargetRef(namespace="ml", name="llama", model="llama-8b")
SHAPE = shape(4, 16, 512, 256)
CHOSEN = EngineConfig(speculative_method="ngram", num_speculative_tokens=3, max_num_seqs=256)


def trial(config: EngineConfig, tps: float, ttft: float, tpot: float, goodput: float) -> TrialResult:
    spreads = {"ttft": (ttft / 2, ttft, ttft * 1.5), "tpot": (tpot / 2, tpot, tpot * 1.5)}
    measured = builders.trial(config, SHAPE, slo=SLO(), goodput=goodput, throughput=0.0, completed=0, **spreads)
    return measured.model_copy(update={"output_tokens_per_s": tps})


def test_classify_by_code_and_forced_kind() -> None:
    evidence = (("Output tokens/s", "100 → 130"),)
    assert (
        fmt.classify(Notify(Severity.WARNING, "Approval needed", "x", code=Code.APPROVAL_REQUIRED)) is fmt.Kind.APPROVAL
    )
    assert fmt.classify(Notify(Severity.WARNING, "Approval needed", "x", code=Code.MANUAL_GATE)) is fmt.Kind.APPROVAL
    assert fmt.classify(Notify(Severity.CRITICAL, "Rollback", "x", code=Code.SLO_BREACH)) is fmt.Kind.ROLLBACK
    assert fmt.classify(Notify(Severity.CRITICAL, "Rollback", "x", code=Code.ABORTED)) is fmt.Kind.ROLLBACK
    assert fmt.classify(Notify(Severity.INFO, "Rollout at 25%", "x", code=Code.WITHIN_SLO)) is fmt.Kind.STEP
    assert fmt.classify(Notify(Severity.INFO, "Rollout started", "x", code=Code.STARTED)) is fmt.Kind.STEP
    assert fmt.classify(Notify(Severity.INFO, "Rollout complete", "x", code=Code.PROMOTED)) is fmt.Kind.STEP
    assert fmt.classify(Notify(Severity.INFO, "Rollout rejected", "x", code=Code.REJECTED)) is fmt.Kind.STEP
    assert fmt.classify(Notify(Severity.INFO, "New config chosen", "x", evidence, Code.STARTED)) is fmt.Kind.DECISION
    assert fmt.classify(Notify(Severity.INFO, "Dry-run decision", "x", code=Code.DRY_RUN)) is fmt.Kind.DECISION
    assert fmt.classify(Notify(Severity.WARNING, "Observation frozen", "x", code=Code.FROZEN)) is fmt.Kind.GENERIC
    assert fmt.classify(Notify(Severity.INFO, "Daily digest", "x", code=Code.DIGEST)) is fmt.Kind.DIGEST
    assert fmt.classify(Notify(Severity.INFO, "Something", "x", (("kind", "rollback"),))) is fmt.Kind.ROLLBACK


def test_a_title_never_chooses_the_layout() -> None:
    """A notification whose title says something else still gets its code's layout."""
    misleading = "Rollback: approval needed for the daily digest, step 2, decision chosen"
    for code, kind in [
        (Code.STEP, fmt.Kind.STEP),
        (Code.FROZEN, fmt.Kind.GENERIC),
        (Code.DIGEST, fmt.Kind.DIGEST),
        (Code.MANUAL_GATE, fmt.Kind.APPROVAL),
        (Code.DRY_RUN, fmt.Kind.DECISION),
        (Code.ABORTED, fmt.Kind.ROLLBACK),
    ]:
        assert fmt.classify(Notify(Severity.INFO, misleading, "x", code=code)) is kind
    assert fmt.classify(Notify(Severity.INFO, misleading, "x")) is fmt.Kind.GENERIC  # no code: nothing to go by


def test_evidence_fields_from_trials_render_a_table() -> None:
    stock = trial(STOCK, 1200, 0.812, 0.041, 1020)
    chosen = trial(CHOSEN, 1650, 0.430, 0.0285, 1590)
    fields = fmt.evidence_fields(stock, chosen, gpu_hours_per_day=(96, 72), cost_per_day=(288, 216))
    assert dict(fields) == {
        "Output tokens/s": "1,200 → 1,650",
        "TTFT p95": "812 ms → 430 ms",
        "TPOT p95": "41.0 ms → 28.5 ms",
        "Goodput tokens/s": "1,020 → 1,590",
        "GPU-hours/day": "96.0 → 72.0",
        "Cost/day": "$288.00 → $216.00",
        "Config": "stock → ngram3+seqs256",
    }
    message = fmt.build_message(TARGET, Notify(Severity.INFO, "New config chosen", "1.56x", fields))
    evidence = message["blocks"][2]["text"]["text"]
    assert evidence.splitlines() == [
        "*Evidence*",
        "```",
        "                    stock  chosen",
        "Output tokens/s     1,200  1,650",
        "TTFT p95           812 ms  430 ms",
        "TPOT p95          41.0 ms  28.5 ms",
        "Goodput tokens/s    1,020  1,590",
        "GPU-hours/day        96.0  72.0",
        "Cost/day          $288.00  $216.00",
        "Config              stock  ngram3+seqs256",
        "```",
    ]


def test_plain_fields_become_section_fields_and_text_is_escaped() -> None:
    fields = (("stock", "1,200 tok/s"), ("chosen", "1,650 tok/s <fast>"), ("config", "ngram3"))
    message = fmt.build_message(TARGET, Notify(Severity.INFO, "New config chosen", "a & b", fields), channel="#ml")
    kinds = [b["type"] for b in message["blocks"]]
    assert kinds == ["header", "section", "section", "context"]
    assert "a &amp; b" in message["blocks"][1]["text"]["text"]
    assert [f["text"] for f in message["blocks"][2]["fields"]] == [
        "*stock*\n1,200 tok/s",
        "*chosen*\n1,650 tok/s &lt;fast&gt;",
        "*config*\nngram3",
    ]
    assert message["text"] == "[info] New config chosen · ml/llama: a &amp; b"  # the fallback is mrkdwn too


def test_block_kit_limits_are_respected() -> None:
    many = tuple((f"k{i}", "v" * 3000) for i in range(25))
    message = fmt.build_message(TARGET, Notify(Severity.INFO, "T" * 400, "r" * 5000, many))
    header = message["blocks"][0]["text"]["text"]
    assert len(header) == fmt.MAX_HEADER
    for block in message["blocks"]:
        if block["type"] == "section" and "fields" in block:
            assert len(block["fields"]) <= fmt.MAX_FIELDS
            assert all(len(f["text"]) <= fmt.MAX_FIELD for f in block["fields"])
        if "text" in block:
            assert len(block["text"]["text"]) <= fmt.MAX_TEXT
    assert sum(len(b.get("fields", [])) for b in message["blocks"]) == 25
    assert len(message["text"]) <= fmt.MAX_TEXT


def test_digest_entry_from_status() -> None:
    now = datetime(2026, 11, 30, 9, tzinfo=UTC)
    rollout = RolloutState(
        id="day-1",
        from_config=STOCK,
        to_config=CHOSEN,
        steps=(10, 50, 100),
        step_index=1,
        weight=50,
        started_at=now,
        expected_gain=1.56,
    )
    entry = fmt.digest_entry(TARGET, TargetStatus(rollout=rollout, last_reasons=("step 2/3",)), rollouts=2)
    assert entry == fmt.DigestEntry(
        target="ml/llama",
        phase="Observing",
        active_config="stock",
        gain="1.56x",
        candidate="ngram3+seqs256",
        canary_weight=50,
        rollouts=2,
        note="step 2/3",
    )
    message = fmt.digest_message(date(2026, 11, 30), [entry])
    lines = [b["text"]["text"] for b in message["blocks"] if b["type"] == "section"]
    assert lines[0] == "*1* targets · *2* rollouts finished · *0* rollbacks in the last 24 h"
    assert lines[1] == (
        "*ml/llama* · Observing · `stock` · 1.56x vs stock\n→ rolling out `ngram3+seqs256` at 50%\nstep 2/3"
    )


def test_per_target_daily_digest_notification() -> None:
    fields = (("config day", "ngram3+seqs256 (1.56x stock, 3 replicas)"), ("day", "$0.41/M output tokens vs API $0.60"))
    note = Notify(
        Severity.INFO,
        "Daily digest",
        "active ngram3+seqs256, phase Observing; 2 windows scheduled",
        fields,
        Code.DIGEST,
    )
    assert fmt.classify(note) is fmt.Kind.DIGEST
    message = fmt.build_message(TARGET, note)
    assert message["blocks"][1]["text"]["text"] == (
        ":calendar: *Daily digest* for `ml/llama` · model `llama-8b`\n"
        "active ngram3+seqs256, phase Observing; 2 windows scheduled"
    )
    assert [f["text"] for f in message["blocks"][2]["fields"]] == [
        "*config day*\nngram3+seqs256 (1.56x stock, 3 replicas)",
        "*day*\n$0.41/M output tokens vs API $0.60",
    ]
