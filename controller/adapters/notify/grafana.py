"""Grafana annotations: every decision marked on the dashboards people already watch (the ``Notifier`` port).

Each rollout step, promotion, rollback, config switch and freeze becomes one annotation
(``POST {grafana}/api/annotations``) per dashboard: the generated Shiftlight dashboard
(:data:`controller.observe.dashboard.UID`) and the dashboards the admin names by UID. An annotation carries the tags
``shiftlight``, ``target:<namespace>/<name>``, ``phase:<phase>`` and ``code:<reason code>``, plus
``dashboard:<uid>`` naming the dashboard the copy is for; its text is the reason sentence Slack gets. The generated
dashboard's annotation query selects the tags ``shiftlight`` and ``dashboard:<its uid>``, so its marks show up
without setup and the copies made for other dashboards do not show twice (Grafana's tag queries search every
dashboard).

Like :class:`controller.adapters.notify.slack.SlackNotifier`: :meth:`GrafanaAnnotator.post` only deduplicates
(same target, title and reason within ``dedup_window_s``), rate-limits (a token bucket; rollbacks, critical messages and
approval requests always go out) and enqueues into a bounded queue; one background thread delivers. Daily digests
are not decisions and are not annotated.

The service-account token is read from its Secret-mounted file for every request (rotation needs no restart); every
message this module logs passes through the one scrubber (:func:`controller.observe.grafana_proxy.scrub`: the token, its
fragments and escaped forms), and none quotes Grafana's answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import requests

from controller.adapters.notify import slack_format
from controller.adapters.notify.delivery_queue import DeliveryStats, Outbox, Voice
from controller.domain.actions import Notify, Severity
from controller.domain.codes import INFO, MARK_OF_LAYOUT, mark_of
from controller.domain.observation import TargetRef
from controller.errors import MetricsUnavailable
from controller.observe import dashboard
from controller.observe.grafana_proxy import GrafanaSettings, scrub
from controller.ports import Notifier

logger = logging.getLogger(__name__)

TAG = "shiftlight"
DASHBOARD_TAG_PREFIX = "dashboard:"


def decision_phase(notification: Notify) -> str | None:
    """What kind of decision a notification reports (the ``phase:`` tag): its code's mark, else its Slack layout's
    (:func:`controller.domain.codes.mark_of`); None for what is not a decision. The title is never read."""
    layout = slack_format.classify(notification)
    if notification.code is None:
        return MARK_OF_LAYOUT[layout]
    mark = mark_of(INFO[notification.code], layout)
    return None if mark is None else mark.value


def reason_code(notification: Notify, phase: str) -> str:
    """The notification's code; without one, the phase itself."""
    return notification.code.value if notification.code else phase


def annotation_tags(target: TargetRef, notification: Notify) -> list[str]:
    phase = decision_phase(notification) or "note"
    return [TAG, f"target:{target}", f"phase:{phase}", f"code:{reason_code(notification, phase)}"]


@dataclass
class AnnotationStats(DeliveryStats):
    """Counters for tests and debugging (never contains the token)."""

    skipped: int = 0


@dataclass(frozen=True)
class _Job:
    label: str
    payloads: tuple[dict[str, Any], ...] = field(default=())


class GrafanaAnnotator:
    """Posts decisions as Grafana annotations from a background thread. Implements ``Notifier``."""

    def __init__(
        self,
        settings: GrafanaSettings,
        *,
        dashboard_uid: str = dashboard.UID,
        dedup_window_s: float = 600.0,
        burst: int = 10,
        rate_per_s: float = 1 / 30,
        queue_size: int = 100,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.settings = settings
        self.dashboard_uids = tuple(dict.fromkeys((dashboard_uid, *settings.dashboard_uids)))
        self.timeout_s = timeout_s
        self.stats = AnnotationStats()
        self._wall_ms = wall_clock_ms
        self._session = requests.Session()
        self._url = f"{settings.url.rstrip('/')}/api/annotations"
        self._outbox: Outbox[_Job] = Outbox(
            self._deliver_job,
            stats=self.stats,
            voice=Voice(logger, "grafana", "annotator", "annotated"),
            name="grafana-annotator",
            size=queue_size,
            dedup_window_s=dedup_window_s,
            burst=burst,
            rate_per_s=rate_per_s,
            clock=clock,
        )

    def __repr__(self) -> str:
        return f"GrafanaAnnotator(url={self.settings.url!r}, dashboards={list(self.dashboard_uids)})"

    # ----- the Notifier port ----------------------------------------------------------------------------
    def post(self, target: TargetRef, notification: Notify) -> None:
        """Queue the annotations of one decision; returns at once. Never raises for delivery problems."""
        phase = decision_phase(notification)
        if phase is None:
            self.stats.skipped += 1
            return
        urgent = notification.severity is Severity.CRITICAL or phase in ("rollback", "approval")
        key = (str(target), notification.title, notification.reason)
        if not self._outbox.admit(key, urgent=urgent, title=notification.title, target=target):
            return
        at = self._wall_ms()
        tags = annotation_tags(target, notification)
        payloads = tuple(
            {
                "dashboardUID": uid,
                "time": at,
                "timeEnd": at,
                "tags": [*tags, f"{DASHBOARD_TAG_PREFIX}{uid}"],
                "text": notification.reason,
            }
            for uid in self.dashboard_uids
        )
        label = f"{phase} {notification.title!r} for {target}"
        self._outbox.submit(_Job(label, payloads), label)

    # ----- delivery -------------------------------------------------------------------------------------
    def _deliver_job(self, job: _Job) -> None:
        for payload in job.payloads:
            self._deliver(job.label, payload)

    def _deliver(self, label: str, payload: dict[str, Any]) -> None:
        where = f"{label} on dashboard {payload['dashboardUID']}"
        token = ""
        try:
            token = self.settings.read_token().get_secret_value()
            response = self._session.post(
                self._url, json=payload, headers={"Authorization": f"Bearer {token}"}, timeout=self.timeout_s
            )
        except MetricsUnavailable as exc:  # the token file
            self.stats.failed += 1
            logger.warning("grafana: %s not annotated: %s", where, exc)
            return
        except requests.exceptions.RequestException as exc:
            self.stats.failed += 1
            logger.warning("grafana: %s not annotated: %s", where, scrub(f"{type(exc).__name__}: {exc}", token))
            return
        if response.status_code == 200:
            self.stats.sent += 1
            logger.info("grafana: annotated %s", where)
        else:
            self.stats.failed += 1
            # the answer's body is not logged: Grafana may echo the Authorization header it refused
            logger.warning("grafana: %s not annotated: HTTP %s", where, response.status_code)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued annotation is delivered (or given up); ``False`` on timeout."""
        return self._outbox.flush(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (up to ``timeout``), then stop the worker."""
        self._outbox.close(timeout)
        self._session.close()


class FanOutNotifier:
    """Several notifiers as one (Slack and Grafana): each gets every notification; one failing stops no other."""

    def __init__(self, notifiers: Sequence[Notifier]) -> None:
        self.notifiers = tuple(notifiers)

    def post(self, target: TargetRef, notification: Notify) -> None:
        for notifier in self.notifiers:
            try:
                notifier.post(target, notification)
            except Exception:  # a notifier must not break the loop nor the other notifiers
                logger.exception("notifier %s failed", type(notifier).__name__)
