"""``PrometheusMetrics``: the real :class:`~controller.ports.MetricsSource`, reading vLLM's metrics from Prometheus.

One observe cycle is ONE instant query: every expression of :func:`controller.observe.queries.observe_queries`
batched with ``or`` and tagged by name (see :func:`controller.observe.promql.batch`), evaluated at ``end`` over the
range ``end - start``. Every failure (connection refused, timeout, HTTP error, NaN, an empty or partial answer, a
label set that is not the expected one, stale data) becomes :class:`~controller.errors.MetricsUnavailable` whose
message names the field; the loop then takes no action. Per-variant SLO signals are the exception: absent, NaN or
infinite values are recorded as problems, never replaced by a number (reading an answer:
:mod:`controller.observe.prometheus_answer`).

Each query is one bounded read (:mod:`controller.http_bounded`): ``timeout_s`` is its whole deadline (retries
included), the answer is capped at ``max_answer_bytes``, ``max_series`` and ``max_samples``, its JSON nesting is
checked before parsing, and every failure is a MetricsUnavailable whose ``kind`` says how it failed. No message
quotes the answer: an HTTP error says its status and Prometheus' one-word ``errorType``; the URL is shown without
its userinfo, and the credentials (bearer token, URL password) are registered with the scrubber
(:func:`controller.domain.scrub.register_secret`).

Connection settings come from :class:`PrometheusSettings` (:mod:`controller.observe.prometheus_settings`, importable
from here too; ``from_env`` reads ``SHIFTLIGHT_PROMETHEUS_*``); a bearer token may live in a Secret-mounted file,
re-read every cycle so rotation needs no restart.
"""

from __future__ import annotations

import math
import re
import ssl
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from controller import http_bounded
from controller.domain.observation import Observation, TargetRef
from controller.domain.scrub import register_secret, scrubbed_error, strip_userinfo, url_secrets
from controller.domain.slo import SLO
from controller.errors import InvalidInput, MetricsUnavailable, ShiftlightError
from controller.observe import promql
from controller.observe import queries as q
from controller.observe.prometheus_answer import AnswerReader, Sample, good_share, tagged
from controller.observe.prometheus_settings import ENV_PREFIX, PrometheusSettings
from controller.observe.report import TrafficReport

#: Statuses retried (within the same deadline) when ``retries`` allows: the proxy in front could not reach Prometheus.
_RETRY_STATUSES = frozenset({502, 503, 504})
#: Prometheus' ``errorType`` values are short words; only such a word is repeated from an error answer.
_ERROR_TYPE = re.compile(r"^[a-z_]{1,32}$")


class PrometheusMetrics:
    """MetricsSource over a Prometheus HTTP API. ``slo`` (optional) lets it count good requests per variant.

    Every error a query, an observation or an SLO count raises (or :meth:`report_many` returns) passes through the
    one scrubber (:func:`controller.domain.scrub.scrubbed_error`) with the bearer token last sent, unchained from
    the exception it came from: an answer that echoes the token cannot carry it into a status or a log."""

    #: What the token is replaced with in an error.
    redacted = "<redacted-prometheus-token>"

    def __init__(self, settings: PrometheusSettings | None = None, *, slo: SLO | None = None) -> None:
        self.settings = settings or PrometheusSettings()
        self.slo = slo
        self.queries_total = 0
        self._token = ""  # the bearer token last sent, for the scrubber
        self._base = self.settings.url.rstrip("/")
        #: the URL as messages show it: without ``user:password@``
        self.shown_url = strip_userinfo(self._base)
        for secret in url_secrets(self.settings.url):
            register_secret(secret)
        if self.settings.bearer_token is not None:
            register_secret(self.settings.bearer_token.get_secret_value())

    def close(self) -> None:
        """Nothing is held between queries (each one is a bounded request of its own)."""

    # ---- HTTP -------------------------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = dict(self.settings.headers)
        token: str | None = None
        if self.settings.bearer_token_file is not None:
            try:
                token = self.settings.bearer_token_file.read_text().strip()
            except OSError as exc:
                raise MetricsUnavailable(
                    f"bearer token file {self.settings.bearer_token_file}: {exc.strerror or type(exc).__name__}"
                ) from None
        elif self.settings.bearer_token is not None:
            token = self.settings.bearer_token.get_secret_value()
        self._token = token or ""
        if token:
            register_secret(token)
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _verify(self) -> ssl.SSLContext | bool:
        if self.settings.ca_file is not None:
            try:
                return ssl.create_default_context(cafile=str(self.settings.ca_file))
            except (OSError, ssl.SSLError) as exc:
                raise MetricsUnavailable(
                    f"CA file {self.settings.ca_file}: {type(exc).__name__}", kind="connection"
                ) from None
        return self.settings.verify_tls

    @contextmanager
    def _scrubbed(self) -> Iterator[None]:
        """Every Shiftlight error raised inside passes through the scrubber with the token last sent."""
        try:
            yield
        except ShiftlightError as exc:
            raise scrubbed_error(exc, self._token, self.redacted) from None

    def _translate(self, what: str, failure: http_bounded.ReadFailed) -> MetricsUnavailable:
        """The failure as a MetricsUnavailable of the same ``kind``: the HTTP status and the kind of failure, never a
        byte of the answer."""
        if failure.kind == "deadline":
            why = f"timed out after {self.settings.timeout_s:g}s (the whole request)"
        elif failure.kind == "connection":
            why = "connection failed"
        elif failure.kind == "http-status":
            why = f"HTTP {failure.status}" + (f" ({failure.detail})" if failure.detail else "")
        elif failure.kind == "too-large":
            why = f"the answer is over {self.settings.max_answer_bytes} bytes"
        elif failure.kind == "too-many":
            why = failure.detail
        else:
            why = f"the answer is not Prometheus JSON ({failure.describe()})"
        return MetricsUnavailable(f"prometheus {self.shown_url} {what}: {why}", kind=failure.kind)

    def _api(self, path: str, form: dict[str, str], what: str) -> Any:
        """POST ``form`` to ``/api/v1/{path}`` within one total deadline (retries included); ``data.result``."""
        self.queries_total += 1
        headers = self._headers()
        verify = self._verify()
        deadline = time.monotonic() + self.settings.timeout_s
        attempts = 1 + self.settings.retries
        try:
            for attempt in range(attempts):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise http_bounded.ReadFailed("deadline")
                limits = http_bounded.Limits(left, max_bytes=self.settings.max_answer_bytes)
                try:
                    answer = http_bounded.request(
                        "POST", f"{self._base}/api/v1/{path}", limits=limits, headers=headers, data=form, verify=verify
                    )
                except http_bounded.ReadFailed as exc:
                    if exc.kind != "connection" or attempt == attempts - 1:
                        raise
                    time.sleep(min(0.2 * 2**attempt, max(0.0, deadline - time.monotonic())))
                    continue
                if answer.status in _RETRY_STATUSES and attempt < attempts - 1:
                    continue
                break
            return self._result(answer, what)
        except http_bounded.ReadFailed as exc:
            raise self._translate(what, exc) from None

    def _result(self, answer: http_bounded.Answer, what: str) -> Any:
        """``data.result`` of a Prometheus answer, at most ``max_series`` of them; an error answer says its status
        and Prometheus' ``errorType`` word, nothing else of the body."""
        if answer.status != 200:
            error_type = ""
            try:
                body = answer.json()
                word = body.get("errorType") if isinstance(body, dict) else None
                error_type = word if isinstance(word, str) and _ERROR_TYPE.match(word) else ""
            except http_bounded.ReadFailed:
                pass
            raise http_bounded.ReadFailed("http-status", error_type, status=answer.status)
        body = answer.json()
        data = body.get("data") if isinstance(body, dict) else None
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(result, list):
            raise http_bounded.ReadFailed("malformed", "not {status: success, data: {result: [...]}}")
        if len(result) > self.settings.max_series:
            raise http_bounded.ReadFailed(
                "too-many", f"the answer holds {len(result)} series (over {self.settings.max_series})"
            )
        samples = sum(len(r["values"]) for r in result if isinstance(r, dict) and isinstance(r.get("values"), list))
        if samples > self.settings.max_samples:
            raise http_bounded.ReadFailed(
                "too-many", f"the answer holds {samples} samples (over {self.settings.max_samples})"
            )
        return result

    def query(self, expr: str, at: datetime, what: str) -> list[Sample]:
        """One instant query; every failure is a MetricsUnavailable naming ``what``."""
        with self._scrubbed():
            return self._query(expr, at, what)

    def _query(self, expr: str, at: datetime, what: str) -> list[Sample]:
        form = {"query": expr, "time": f"{at.timestamp():.3f}", "timeout": promql.duration(self.settings.timeout_s)}
        return self._samples(self._api("query", form, what), what, value_key="value")

    def query_range(self, expr: str, start: datetime, end: datetime, step_s: float, what: str) -> list[Any]:
        """One range query; returns Prometheus' matrix (``[{metric, values: [[ts, "v"], ...]}]``)."""
        with self._scrubbed():
            return self._query_range(expr, start, end, step_s, what)

    def _query_range(self, expr: str, start: datetime, end: datetime, step_s: float, what: str) -> list[Any]:
        form = {
            "query": expr,
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
            "step": promql.duration(step_s),
            "timeout": promql.duration(self.settings.timeout_s),
        }
        result = self._api("query_range", form, what)
        if not isinstance(result, list):
            raise MetricsUnavailable(f"{what}: unexpected answer type {type(result).__name__}", kind="malformed")
        return list(result)

    @staticmethod
    def _samples(result: Any, what: str, value_key: str) -> list[Sample]:
        if not isinstance(result, list):
            raise MetricsUnavailable(f"{what}: unexpected answer type {type(result).__name__}")
        out: list[Sample] = []
        for index, item in enumerate(result, start=1):
            # the message says which part is malformed, never what it holds (an echo of a credential, say)
            where = f"{what}: malformed sample {index} of {len(result)}"
            try:
                labels = {str(k): str(v) for k, v in item["metric"].items()}
            except (KeyError, TypeError, AttributeError):
                raise MetricsUnavailable(f"{where}: 'metric' is not a mapping of labels") from None
            try:
                value = float(item[value_key][1])
            except (KeyError, TypeError, ValueError, IndexError):
                raise MetricsUnavailable(f"{where}: {value_key!r} is not a [time, number] pair") from None
            out.append((labels, value))
        return out

    # ---- observe ----------------------------------------------------------------------------------------------

    def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
        with self._scrubbed():
            return self.report(target, start=start, end=end).observation()

    @staticmethod
    def _range(start: datetime, end: datetime) -> str:
        seconds = (end - start).total_seconds()
        if seconds < 1:
            raise InvalidInput(f"window must be at least 1 s, got {seconds}", source="observe", field="start")
        return promql.duration(round(seconds))

    def report(self, target: TargetRef, *, start: datetime, end: datetime) -> TrafficReport:
        """One target, one query."""
        named = q.observe_queries(self.settings.selector(target), self._range(start, end), self.settings.variant_label)
        before = self.queries_total
        samples = self.query(promql.batch(named), end, what=f"observe {target}")
        with self._scrubbed():
            return AnswerReader(
                self.settings, self.slo, target, start, end, named, tagged(samples), self.queries_total - before
            ).report()

    def report_many(
        self, targets: Sequence[TargetRef], *, start: datetime, end: datetime
    ) -> dict[TargetRef, TrafficReport | MetricsUnavailable]:
        """Every target of a cycle from ONE query grouped by model and namespace: a report or the reason it failed,
        per target. If the query itself fails, every target gets that error."""
        named = q.observe_queries(self.settings.fleet_selector(), self._range(start, end), self.settings.variant_label)
        try:
            samples = self.query(promql.batch(named), end, what=f"observe {len(targets)} targets")
        except MetricsUnavailable as exc:
            return dict.fromkeys(targets, exc)
        split: dict[tuple[str, str], list[Sample]] = defaultdict(list)
        for labels, value in samples:
            model = labels.pop(self.settings.model_label, "")
            namespace = labels.pop(self.settings.namespace_label, "") if self.settings.match_namespace else ""
            split[(model, namespace)].append((labels, value))
        out: dict[TargetRef, TrafficReport | MetricsUnavailable] = {}
        for target in targets:
            key = (target.model, target.namespace if self.settings.match_namespace else "")
            try:
                out[target] = AnswerReader(
                    self.settings, self.slo, target, start, end, named, tagged(split.get(key, [])), 1
                ).report()
            except MetricsUnavailable as exc:
                out[target] = scrubbed_error(exc, self._token, self.redacted)
        return out

    def slo_counts(
        self, target: TargetRef, slo: SLO, *, end: datetime, windows_s: Sequence[float] = (300, 3600)
    ) -> dict[str, dict[float, tuple[float, float]]]:
        """``variant -> window_s -> (good, total)`` requests over each look-back window ending at ``end``, in ONE
        query: the inputs of :func:`controller.decide.signals.slo_signal.assess`. ``good`` is estimated as in
        :class:`VariantStats` (shares of the TTFT/TPOT histograms within the SLO bounds, bucket-conservative)."""
        windows = {promql.duration(w): float(w) for w in windows_s}
        with self._scrubbed():
            return self._slo_counts(target, slo, end=end, windows=windows)

    def _slo_counts(
        self, target: TargetRef, slo: SLO, *, end: datetime, windows: dict[str, float]
    ) -> dict[str, dict[float, tuple[float, float]]]:
        named = q.slo_count_queries(self.settings.selector(target), windows, self.settings.variant_label)
        samples = self.query(promql.batch(named), end, what=f"slo counts {target}")
        reader = AnswerReader(self.settings, self.slo, target, end, end, named, tagged(samples), 1)
        out: dict[str, dict[float, tuple[float, float]]] = defaultdict(dict)
        for window, seconds in windows.items():
            totals = reader.by_variant(f"v_requests@{window}")
            ttft = reader.buckets(f"v_ttft_buckets@{window}", per_variant=True)
            tpot = reader.buckets(f"v_tpot_buckets@{window}", per_variant=True)
            for variant, total in totals.items():
                if not math.isfinite(total):
                    raise reader.fail(f"v_requests@{window}", f"variant {variant}: value is {total}")
                total = max(total, 0.0)
                share = good_share(ttft.get(variant), tpot.get(variant), slo)
                out[variant][seconds] = (total * share if share is not None else 0.0, total)
        return dict(out)


__all__ = ["ENV_PREFIX", "PrometheusMetrics", "PrometheusSettings", "Sample", "good_share"]
