"""Slack notifier: the :class:`controller.ports.Notifier` port on a Slack incoming webhook (``slack_sdk``).

* Never blocks the control loop: :meth:`SlackNotifier.post` only deduplicates, rate-limits and enqueues into a
  bounded queue; one background worker thread delivers. :meth:`flush` waits for delivery (tests, shutdown).
* Deduplicated: the same target + title + reason within ``dedup_window_s`` is sent once.
* Rate-limited by a token bucket (``burst`` messages, refilled at ``rate_per_s``). Over the rate, messages are
  dropped and counted, except rollbacks, critical messages, approval requests and daily digests, which always go out.
* Retried by ``slack_sdk``'s retry machinery with Shiftlight's handlers: HTTP 429 waits for ``Retry-After``
  (capped), any 5xx and connection errors back off exponentially; the waits end early on :meth:`close`.
* The webhook URL is a secret: it comes only from a Secret-mounted file (:meth:`from_secret_file`) or a named
  environment variable (:meth:`from_env`), is held as a ``SecretStr``, and a redacting filter removes it from
  every log record of this module and of the webhook client. It never reaches Events or status.
"""

from __future__ import annotations

import email.utils
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.webhook import WebhookClient

from controller.adapters.notify import slack_format
from controller.adapters.notify.delivery_queue import DeliveryStats, Outbox, Voice
from controller.domain.actions import Notify, Severity
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput

logger = logging.getLogger(__name__)
#: The logger handed to ``slack_sdk``'s WebhookClient (it logs the URL at debug level; the filter redacts it).
sdk_logger = logging.getLogger(f"{__name__}.sdk")

REDACTED = "<redacted-slack-webhook>"
DEFAULT_ENV_VAR = "SHIFTLIGHT_SLACK_WEBHOOK_URL"
DEFAULT_FILE_ENV_VAR = "SHIFTLIGHT_SLACK_WEBHOOK_FILE"


class RedactingFilter(logging.Filter):
    """Replaces every occurrence of the given secrets in a record's message and traceback text."""

    def __init__(self, secrets: Sequence[str]) -> None:
        super().__init__()
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


def _secret_variants(url: str) -> list[str]:
    """The URL and its path (the token part), so a partial echo is redacted too."""
    parts = urlsplit(url)
    variants = [url]
    if len(parts.path) > 8:
        variants.append(parts.path)
    return variants


@dataclass
class SlackStats(DeliveryStats):
    """Counters for tests, ``/metrics`` and debugging (never contains the URL)."""

    retries: int = 0


# ----- retries ----------------------------------------------------------------------------------------


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date; ``None`` if unusable."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class _InterruptibleRetry(RetryHandler):
    """A ``slack_sdk`` retry handler whose waits end early when the notifier closes."""

    def __init__(
        self, *, max_retry_count: int, backoff_factor: float, stop: threading.Event, stats: SlackStats
    ) -> None:
        super().__init__(max_retry_count, BackoffRetryIntervalCalculator(backoff_factor=backoff_factor))
        self._stop = stop
        self._stats = stats

    def _delay(self, state: RetryState, response: HttpResponse | None) -> float:
        return self.interval_calculator.calculate_sleep_duration(state.current_attempt)

    def prepare_for_next_attempt(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        delay = self._delay(state, response)
        self._stats.retries += 1
        logger.info(
            "slack webhook: retry %d in %.1fs after %s",
            state.current_attempt + 1,
            delay,
            f"HTTP {response.status_code}" if response is not None else type(error).__name__,
        )
        state.increment_current_attempt()
        if self._stop.wait(delay):
            return  # closing: give up instead of retrying
        state.next_attempt_requested = True


class RateLimitRetry(_InterruptibleRetry):
    """HTTP 429: wait as long as ``Retry-After`` says (capped at ``max_wait_s``)."""

    def __init__(
        self,
        *,
        max_wait_s: float,
        max_retry_count: int,
        backoff_factor: float,
        stop: threading.Event,
        stats: SlackStats,
    ) -> None:
        super().__init__(max_retry_count=max_retry_count, backoff_factor=backoff_factor, stop=stop, stats=stats)
        self.max_wait_s = max_wait_s

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        return response is not None and response.status_code == 429

    def _delay(self, state: RetryState, response: HttpResponse | None) -> float:
        header = None
        if response is not None:
            for key, values in response.headers.items():
                if key.lower() == "retry-after" and values:
                    header = values[0]
        seconds = retry_after_seconds(header)
        if seconds is None:
            seconds = super()._delay(state, response)
        return min(seconds, self.max_wait_s)


class ServerErrorRetry(_InterruptibleRetry):
    """Any HTTP 5xx: exponential backoff with jitter."""

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        return response is not None and 500 <= response.status_code <= 599


class ConnectionRetry(_InterruptibleRetry):
    """Connection refused/reset, timeouts: exponential backoff with jitter."""

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        return response is None and isinstance(error, OSError)


# ----- the notifier -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    label: str
    payload: dict[str, Any]


class SlackNotifier:
    """Posts notifications to a Slack incoming webhook from a background thread. Implements ``Notifier``."""

    def __init__(
        self,
        webhook_url: SecretStr,
        *,
        channel: str = "",
        dedup_window_s: float = 600.0,
        burst: int = 10,
        rate_per_s: float = 1 / 30,
        queue_size: int = 100,
        max_retries: int = 4,
        backoff_factor: float = 0.5,
        max_retry_after_s: float = 60.0,
        timeout_s: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        url = webhook_url.get_secret_value().strip()
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            raise InvalidInput("the Slack webhook URL must be an http(s) URL", field="webhook")
        self.channel = channel
        self.stats = SlackStats()
        self._digests: set[date] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()  # set on close: pending retries give up
        self._redactor = RedactingFilter(_secret_variants(url))
        for log in (logger, sdk_logger):
            log.addFilter(self._redactor)
        common: dict[str, Any] = {"max_retry_count": max_retries, "backoff_factor": backoff_factor}
        self._client = WebhookClient(
            url,
            timeout=timeout_s,
            logger=sdk_logger,
            retry_handlers=[
                RateLimitRetry(max_wait_s=max_retry_after_s, stop=self._stop, stats=self.stats, **common),
                ServerErrorRetry(stop=self._stop, stats=self.stats, **common),
                ConnectionRetry(stop=self._stop, stats=self.stats, **common),
            ],
        )
        self._outbox: Outbox[_Job] = Outbox(
            self._deliver,
            stats=self.stats,
            voice=Voice(logger, "slack", "notifier", "sent"),
            name="slack-notifier",
            size=queue_size,
            dedup_window_s=dedup_window_s,
            burst=burst,
            rate_per_s=rate_per_s,
            clock=clock,
        )

    # ----- construction from a Secret -------------------------------------------------------------------
    @classmethod
    def from_secret_file(cls, path: str | Path, **kwargs: Any) -> SlackNotifier:
        """Read the URL from a file (a mounted Secret key). Errors name the file, never its content."""
        file = Path(path)
        try:
            url = file.read_text().strip()
        except OSError as exc:
            raise InvalidInput(f"cannot read the Slack webhook file: {exc.strerror}", source=str(file)) from None
        if not url:
            raise InvalidInput("the Slack webhook file is empty", source=str(file))
        return cls(SecretStr(url), **kwargs)

    @classmethod
    def from_env(cls, var: str = DEFAULT_ENV_VAR, **kwargs: Any) -> SlackNotifier:
        """Read the URL from the environment variable named ``var`` (set from a Secret with ``secretKeyRef``)."""
        url = os.environ.get(var, "").strip()
        if not url:
            raise InvalidInput(f"environment variable {var} is not set or empty", source="env", field=var)
        return cls(SecretStr(url), **kwargs)

    def __repr__(self) -> str:
        return f"SlackNotifier(channel={self.channel!r}, url={REDACTED})"

    # ----- the Notifier port ----------------------------------------------------------------------------
    def post(self, target: TargetRef, notification: Notify) -> None:
        """Queue a notification for delivery; returns at once. Never raises for delivery problems."""
        kind = slack_format.classify(notification)
        urgent = notification.severity is Severity.CRITICAL or kind in (
            slack_format.Kind.ROLLBACK,
            slack_format.Kind.APPROVAL,
            slack_format.Kind.DIGEST,  # once a day per target: bounded already
        )
        key = (str(target), notification.title, notification.reason)
        if not self._outbox.admit(key, urgent=urgent, title=notification.title, target=target):
            return
        payload = slack_format.build_message(target, notification, channel=self.channel)
        label = f"{kind.value} {notification.title!r} for {target}"
        self._outbox.submit(_Job(label, payload), label)

    def post_digest(self, day: date, entries: Sequence[slack_format.DigestEntry]) -> None:
        """Queue the daily digest (not rate-limited; sent once per day)."""
        with self._lock:
            seen = day in self._digests
            self._digests.add(day)
        if seen:
            self._outbox.count_duplicate()
            return
        label = f"digest {day.isoformat()}"
        self._outbox.submit(_Job(label, slack_format.digest_message(day, entries, channel=self.channel)), label)

    # ----- delivery -------------------------------------------------------------------------------------

    def _deliver(self, job: _Job) -> None:
        try:
            response = self._client.send(text=job.payload["text"], blocks=job.payload["blocks"])
        except Exception as exc:  # connection errors after retries: log (redacted) and carry on
            self.stats.failed += 1
            logger.warning("slack: %s failed: %s: %s", job.label, type(exc).__name__, self._redactor.redact(str(exc)))
            return
        if response.status_code == 200:
            self.stats.sent += 1
            logger.info("slack: sent %s", job.label)
        else:
            self.stats.failed += 1
            body = self._redactor.redact(str(response.body))[:200]
            logger.warning("slack: %s failed: HTTP %s %s", job.label, response.status_code, body)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued message is delivered (or given up); ``False`` on timeout."""
        return self._outbox.flush(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (up to ``timeout``), then stop the worker; pending retries are abandoned."""
        self._outbox.close(timeout, before_join=self._stop.set)
        for log in (logger, sdk_logger):
            log.removeFilter(self._redactor)


def notifier_from_env(env: Mapping[str, str] | None = None, **kwargs: Any) -> SlackNotifier | None:
    """The operator-wide notifier as the Helm chart configures it, or ``None`` when Slack is off.

    ``SHIFTLIGHT_SLACK_WEBHOOK_FILE`` names the mounted Secret file holding the URL (``SHIFTLIGHT_SLACK_WEBHOOK_URL``,
    set from a ``secretKeyRef``, is the fallback); ``SHIFTLIGHT_SLACK_CHANNEL`` is the channel label.
    """
    e = os.environ if env is None else env
    channel = e.get("SHIFTLIGHT_SLACK_CHANNEL", "")
    options = {"channel": channel, **kwargs}
    path = e.get(DEFAULT_FILE_ENV_VAR, "").strip()
    if path:
        return SlackNotifier.from_secret_file(path, **options)
    url = e.get(DEFAULT_ENV_VAR, "").strip()
    if url:
        return SlackNotifier(SecretStr(url), **options)
    return None
