"""SlackNotifier against a real local webhook receiver: content, dedup, rate limit, retries, redaction."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
from pydantic import SecretStr

from controller.adapters.notify import slack_format
from controller.adapters.notify.slack import (
    REDACTED,
    RedactingFilter,
    SlackNotifier,
    notifier_from_env,
    retry_after_seconds,
)
from controller.domain.actions import Notify, Severity
from controller.domain.codes import Code
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput

from .conftest import FakeMonotonic, Receiver, Reply

pytestmark = pytest.mark.slack

TARGET = TargetRef(namespace="ml", name="llama", model="meta-llama/Llama-3.1-8B-Instruct")
EVIDENCE = (
    ("Output tokens/s", "1,200 → 1,650"),
    ("TTFT p95", "812 ms → 430 ms"),
    ("TPOT p95", "41.0 ms → 28.5 ms"),
    ("Goodput tokens/s", "1,020 → 1,590"),
    ("GPU-hours/day", "96.0 → 72.0"),
    ("Cost/day", "$288.00 → $216.00"),
)


def make(receiver: Receiver, clock: FakeMonotonic, **kwargs: object) -> SlackNotifier:
    options: dict[str, object] = {"clock": clock, "backoff_factor": 0.01, "channel": "#ml-serving"}
    options.update(kwargs)
    return SlackNotifier(SecretStr(receiver.url), **options)  # type: ignore[arg-type]


def texts(payload: dict[str, object]) -> str:
    """All text in a Block Kit payload, flattened."""
    out: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "text" and isinstance(value, str):
                    out.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(payload)
    return "\n".join(out)


def test_decision_with_evidence_table_is_delivered(receiver: Receiver, fake_clock: FakeMonotonic) -> None:
    notifier = make(receiver, fake_clock)
    try:
        notifier.post(TARGET, Notify(Severity.INFO, "New config chosen", "ngram3+seqs256 gains 1.56x", EVIDENCE))
        assert notifier.flush(30)
    finally:
        notifier.close()
    assert len(receiver.requests) == 1
    assert receiver.paths == ["/services/T0SHIFT/B0LIGHT/s3cr3tT0k3nDoNotLog"]
    payload = receiver.requests[0]
    assert payload["text"].startswith("[info] New config chosen · ml/llama")
    assert payload["blocks"][0] == {
        "type": "header",
        "text": {"type": "plain_text", "text": "New config chosen · llama", "emoji": True},
    }
    body = texts(payload)
    assert "*Decision* for `ml/llama`" in body
    table = next(b["text"]["text"] for b in payload["blocks"] if "Evidence" in b.get("text", {}).get("text", ""))
    lines = table.split("\n")
    assert lines[:2] == ["*Evidence*", "```"]
    assert lines[2].split() == ["stock", "chosen"]
    assert "Output tokens/s" in table and "1,200" in table and "1,650" in table
    assert "812 ms" in table and "430 ms" in table and "28.5 ms" in table
    assert "GPU-hours/day" in table and "96.0" in table and "72.0" in table
    assert "$288.00" in table and "$216.00" in table
    assert "channel #ml-serving" in body
    assert notifier.stats.sent == 1 and notifier.stats.failed == 0


def test_approval_rollback_step_and_digest_messages(receiver: Receiver, fake_clock: FakeMonotonic) -> None:
    notifier = make(receiver, fake_clock)
    try:
        notifier.post(
            TARGET,
            Notify(Severity.WARNING, "Approval needed", "kv-fp8 may change outputs", code=Code.APPROVAL_REQUIRED),
        )
        notifier.post(
            TARGET, Notify(Severity.INFO, "Rollout at 25%", "step 2/4: 25% of traffic to ngram3", code=Code.STEP)
        )
        notifier.post(
            TARGET,
            Notify(
                Severity.CRITICAL, "Rollback", "rolled back ngram3 at 25%: TTFT p95 2.4 s > 2 s", code=Code.SLO_BREACH
            ),
        )
        entries = [slack_format.DigestEntry("ml/llama", "Observing", "ngram3+seqs256", gain="1.56x", rollouts=1)]
        notifier.post_digest(slack_format.date(2026, 11, 30), entries)
        fake_clock.advance(3600)
        notifier.post_digest(slack_format.date(2026, 11, 30), entries)  # once per day
        assert notifier.flush(30)
    finally:
        notifier.close()
    approval, step, rollback, digest = (texts(p) for p in receiver.requests)
    assert notifier.stats.dropped_duplicate == 1
    assert "```\nshiftctl approve llama -n ml\n```" in approval
    assert "shiftctl reject llama -n ml" in approval
    assert "kv-fp8 may change outputs" in approval
    assert "Rollout at 25% · llama" in step and "step 2/4: 25% of traffic to ngram3" in step
    assert "*Cause:* rolled back ngram3 at 25%: TTFT p95 2.4 s &gt; 2 s" in rollback
    assert "Shiftlight daily digest · 2026-11-30" in digest
    assert "*ml/llama* · Observing · `ngram3+seqs256` · 1.56x vs stock" in digest


def test_duplicates_within_the_window_are_sent_once(receiver: Receiver, fake_clock: FakeMonotonic) -> None:
    notifier = make(receiver, fake_clock, dedup_window_s=600)
    note = Notify(Severity.WARNING, "Observation frozen", "Prometheus returned no data")
    try:
        notifier.post(TARGET, note)
        notifier.post(TARGET, note)
        fake_clock.advance(300)
        notifier.post(TARGET, note)
        notifier.post(TargetRef("other", "llama", "m"), note)  # another target is not a duplicate
        fake_clock.advance(301)
        notifier.post(TARGET, note)  # window over
        assert notifier.flush(30)
    finally:
        notifier.close()
    assert len(receiver.requests) == 3
    assert notifier.stats.dropped_duplicate == 2


def test_token_bucket_drops_over_the_rate_but_never_rollbacks(receiver: Receiver, fake_clock: FakeMonotonic) -> None:
    notifier = make(receiver, fake_clock, burst=2, rate_per_s=1 / 60)
    try:
        for i in range(4):
            notifier.post(TARGET, Notify(Severity.INFO, f"Rollout at {10 * (i + 1)}%", f"step {i}", code=Code.STEP))
        notifier.post(TARGET, Notify(Severity.CRITICAL, "Rollback", "analysis failed", code=Code.ROLLBACK))
        notifier.post(TARGET, Notify(Severity.INFO, "Daily digest", "active stock", code=Code.DIGEST))
        fake_clock.advance(60)  # one token back
        notifier.post(TARGET, Notify(Severity.INFO, "Rollout complete", "promoted"))
        notifier.post(TARGET, Notify(Severity.INFO, "Rollout started", "again"))
        assert notifier.flush(30)
    finally:
        notifier.close()
    titles = [p["blocks"][0]["text"]["text"] for p in receiver.requests]
    assert titles == [
        "Rollout at 10% · llama",
        "Rollout at 20% · llama",
        "Rollback · llama",
        "Daily digest · llama",
        "Rollout complete · llama",
    ]
    assert notifier.stats.dropped_rate_limited == 3


def test_429_waits_for_retry_after_then_succeeds(
    receiver: Receiver, fake_clock: FakeMonotonic, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    receiver.script = [Reply(429, {"Retry-After": "1"}, "rate_limited")]
    notifier = make(receiver, fake_clock)
    try:
        notifier.post(TARGET, Notify(Severity.INFO, "Rollout at 50%", "step 3/4"))
        assert notifier.flush(30)
    finally:
        notifier.close()
    assert len(receiver.requests) == 2
    assert receiver.requests[0] == receiver.requests[1]
    assert notifier.stats.retries == 1 and notifier.stats.sent == 1
    assert "retry 1 in 1.0s after HTTP 429" in caplog.text


def test_5xx_backs_off_and_retries_then_gives_up(
    receiver: Receiver, fake_clock: FakeMonotonic, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    receiver.script = [Reply(502), Reply(503), Reply(500), Reply(500), Reply(500), Reply(500)]
    notifier = make(receiver, fake_clock, max_retries=2)
    try:
        notifier.post(TARGET, Notify(Severity.INFO, "Rollout at 50%", "first"))  # 502, 503, then 500: gives up
        notifier.post(TARGET, Notify(Severity.INFO, "Rollout at 75%", "second"))  # 500 x3: gives up
        assert notifier.flush(30)
    finally:
        notifier.close()
    assert len(receiver.requests) == 6
    assert notifier.stats.retries == 4
    assert notifier.stats.failed == 2 and notifier.stats.sent == 0
    assert "after HTTP 502" in caplog.text and "after HTTP 503" in caplog.text
    assert "failed: HTTP 500" in caplog.text


def test_post_returns_while_delivery_is_stuck_and_the_queue_is_bounded(
    receiver: Receiver, fake_clock: FakeMonotonic
) -> None:
    receiver.hold.clear()  # the receiver takes requests but does not answer
    notifier = make(receiver, fake_clock, queue_size=2)
    try:
        notifier.post(TARGET, Notify(Severity.INFO, "Rollout at 10%", "a"))
        assert receiver.arrived.wait(30)  # the worker is now blocked inside the HTTP call
        for i in range(4):
            notifier.post(TARGET, Notify(Severity.INFO, f"Rollout at {20 + i}%", "b"))
        assert notifier.stats.dropped_queue_full == 2
        assert notifier.stats.sent == 0
        receiver.hold.set()
        assert notifier.flush(30)
    finally:
        notifier.close()
    assert notifier.stats.sent == 3
    assert len(receiver.requests) == 3


@pytest.mark.security
def test_webhook_url_never_appears_in_logs(
    receiver: Receiver, fake_clock: FakeMonotonic, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    receiver.script = [Reply(429, {"Retry-After": "0"}), Reply(404, body="no_service")]
    notifier = make(receiver, fake_clock, max_retries=1)
    try:
        notifier.post(TARGET, Notify(Severity.INFO, "Rollout at 10%", "x"))
        assert notifier.flush(30)
        assert REDACTED in repr(notifier) and receiver.url not in repr(notifier)
    finally:
        notifier.close()
    # a dead endpoint: connection refused, retried, then given up
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    dead_url = f"http://127.0.0.1:{dead_port}/services/T0DEAD/B0DEAD/an0therS3cret"
    dead = SlackNotifier(SecretStr(dead_url), clock=fake_clock, backoff_factor=0.01, max_retries=1)
    try:
        dead.post(TARGET, Notify(Severity.INFO, "Rollout at 10%", "x"))
        assert dead.flush(30)
    finally:
        dead.close()
    assert dead.stats.failed == 1
    assert "Sending a request" in caplog.text  # slack_sdk's own debug line was logged ...
    assert REDACTED in caplog.text  # ... with the URL redacted
    for secret in (receiver.url, "s3cr3tT0k3nDoNotLog", dead_url, "an0therS3cret"):
        assert secret not in caplog.text
        for record in caplog.records:
            assert secret not in record.getMessage()


@pytest.mark.security
def test_redacting_filter_covers_args_and_tracebacks() -> None:
    secret = "https://hooks.slack.com/services/T1/B2/xyz"
    log = logging.getLogger("tests.slack.redaction")
    filt = RedactingFilter([secret])
    log.addFilter(filt)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    log.addHandler(handler)
    try:
        log.warning("posting to %s", secret)
        try:
            raise ValueError(f"bad {secret}")
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
        log.removeFilter(filt)
    assert records[0].getMessage() == f"posting to {REDACTED}"
    assert records[1].exc_text is not None and secret not in records[1].exc_text and REDACTED in records[1].exc_text


@pytest.mark.security
def test_url_only_from_a_secret_file_or_named_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "http://127.0.0.1:9/services/T/B/fromfile"
    file = tmp_path / "webhook-url"
    file.write_text(secret + "\n")
    notifier = SlackNotifier.from_secret_file(file)
    notifier.close()
    monkeypatch.setenv("TEAM_SLACK_URL", secret)
    SlackNotifier.from_env("TEAM_SLACK_URL").close()

    (tmp_path / "empty").write_text("\n")
    with pytest.raises(InvalidInput, match="empty") as empty:
        SlackNotifier.from_secret_file(tmp_path / "empty")
    assert empty.value.source == str(tmp_path / "empty")
    with pytest.raises(InvalidInput, match="cannot read"):
        SlackNotifier.from_secret_file(tmp_path / "missing")
    with pytest.raises(InvalidInput, match="UNSET_SLACK_URL"):
        SlackNotifier.from_env("UNSET_SLACK_URL")
    with pytest.raises(InvalidInput) as bad:
        SlackNotifier(SecretStr("ftp://example.com/s3cret"))
    assert "s3cret" not in str(bad.value)


def test_retry_after_header_forms() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("7", now=now) == 7.0
    assert retry_after_seconds("Mon, 30 Nov 2026 12:00:05 GMT", now=now) == 5.0
    assert retry_after_seconds("Mon, 30 Nov 2026 11:00:00 GMT", now=now) == 0.0
    assert retry_after_seconds("soon", now=now) is None
    assert retry_after_seconds(None) is None


def test_notifier_from_the_chart_environment(receiver: Receiver, tmp_path: Path) -> None:
    assert notifier_from_env({}) is None
    file = tmp_path / "webhook-url"
    file.write_text(receiver.url)
    env = {"SHIFTLIGHT_SLACK_WEBHOOK_FILE": str(file), "SHIFTLIGHT_SLACK_CHANNEL": "#ml"}
    notifier = notifier_from_env(env, backoff_factor=0.01)
    assert notifier is not None and notifier.channel == "#ml"
    try:
        notifier.post(TARGET, Notify(Severity.INFO, "Rollout complete", "promoted"))
        assert notifier.flush(30)
    finally:
        notifier.close()
    assert "channel #ml" in texts(receiver.requests[0])
