"""Prometheus through Grafana's datasource proxy: the same queries, answers and checks, another door.

Many teams can reach Grafana but not the Prometheus behind it. Grafana forwards
``{grafana}/api/datasources/proxy/uid/{datasource_uid}/api/v1/query`` (and ``query_range``) to the datasource, with
Grafana's own authentication: a service-account token sent as ``Authorization: Bearer``. :class:`GrafanaMetrics` is
:class:`~controller.observe.prometheus.PrometheusMetrics` on that base URL, so the PromQL
(:mod:`controller.observe.queries`) and the reading of answers are one code path for both ways in.

What differs is the failures Grafana itself answers, each a :class:`GrafanaUnavailable` (a
:class:`~controller.errors.MetricsUnavailable`, so the loop freezes instead of acting) with a machine-readable
``reason``:

* 401 / 403: ``grafana-token-rejected`` (the token is wrong, expired or lacks the datasource's query permission);
* 404: ``grafana-datasource-not-found`` (no datasource with that UID);
* 502: ``grafana-datasource-down`` (Grafana could not reach the Prometheus behind it).

The token is an admin setting: it lives in a Secret-mounted file (re-read every query, so rotation needs no
restart) and never appears in a message, a log record, the status or an Event. Every error a query, an observation
or an SLO count raises (or returns, for :meth:`GrafanaMetrics.report_many`) once the token is loaded passes through
one scrubber (:mod:`controller.domain.scrub`): the token, any quarter or more of it, and its ``\\u``-escaped,
JSON-escaped and URL-encoded forms are removed, and the exception it was raised from is not chained (a traceback
cannot repeat Grafana's answer). No message quotes a response body: an HTTP error says its status, a malformed
answer says which part was malformed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from controller import http_bounded
from controller.domain import scrub as scrubber
from controller.domain.scrub import register_secret, strip_userinfo, url_secrets
from controller.domain.slo import SLO
from controller.errors import InvalidInput, MetricsUnavailable
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings

GrafanaReason = Literal[
    "grafana-token-rejected",
    "grafana-datasource-not-found",
    "grafana-datasource-down",
    "grafana-token-unreadable",
    "grafana-http-error",
    "grafana-unreachable",
]
#: The reason of each HTTP status Grafana answers itself.
STATUS_REASONS: Mapping[int, GrafanaReason] = {
    401: "grafana-token-rejected",
    403: "grafana-token-rejected",
    404: "grafana-datasource-not-found",
    502: "grafana-datasource-down",
}
REDACTED = "<redacted-grafana-token>"
_UID = r"^[A-Za-z0-9_.-]{1,40}$"


class GrafanaUnavailable(MetricsUnavailable):
    """Metrics could not be read through Grafana; ``reason`` says why (see :data:`GrafanaReason`)."""

    def __init__(self, reason: GrafanaReason, message: str, *, delay_s: float = 30.0) -> None:
        super().__init__(f"{reason}: {message}", delay_s=delay_s)
        self.reason = reason


class GrafanaSettings(BaseModel):
    """How to reach Grafana: its URL, the service-account token file, the Prometheus datasource, the dashboards."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(pattern=r"^https?://[^\s/]+(/[^\s]*)?$", description="Grafana's base URL")
    token_file: Path = Field(description="Secret-mounted service-account token, re-read at every request")
    datasource_uid: str | None = Field(
        default=None, pattern=_UID, description="the Prometheus datasource to query; None: metrics come elsewhere"
    )
    annotations: bool = Field(default=False, description="post every decision as an annotation")
    dashboard_uids: tuple[str, ...] = Field(
        default=(), description="dashboards annotated besides the Shiftlight dashboard"
    )

    def proxy_url(self) -> str:
        """The datasource's Prometheus HTTP API root, behind Grafana's proxy."""
        if self.datasource_uid is None:
            raise InvalidInput("no datasource UID", source="environment", field="SHIFTLIGHT_GRAFANA_DATASOURCE_UID")
        return f"{self.url.rstrip('/')}/api/datasources/proxy/uid/{self.datasource_uid}"

    def read_token(self) -> SecretStr:
        """The token, from its file. Errors name the file, never its content."""
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise GrafanaUnavailable(
                "grafana-token-unreadable", f"cannot read the token file {self.token_file}: {exc.strerror}"
            ) from None
        if not token:
            raise GrafanaUnavailable("grafana-token-unreadable", f"the token file {self.token_file} is empty")
        return SecretStr(token)


def scrub(text: str, secret: str) -> str:
    """``text`` without ``secret``, any quarter or more of it, or its escaped forms (:mod:`controller.domain.scrub`)."""
    return scrubber.scrub(text, secret, REDACTED)


class GrafanaMetrics(PrometheusMetrics):
    """The MetricsSource of :class:`PrometheusMetrics` through Grafana's datasource proxy. Its errors pass through
    the base class's scrubber with Grafana's token (the one it sends)."""

    redacted = REDACTED

    def __init__(
        self, grafana: GrafanaSettings, settings: PrometheusSettings | None = None, *, slo: SLO | None = None
    ) -> None:
        base = settings or PrometheusSettings()
        # the token is Grafana's, read by this class; the Prometheus settings carry none of their own
        super().__init__(
            base.model_copy(update={"url": grafana.proxy_url(), "bearer_token": None, "bearer_token_file": None}),
            slo=slo,
        )
        self.grafana = grafana
        self._token = ""
        for secret in url_secrets(grafana.url):
            register_secret(secret)

    def _headers(self) -> dict[str, str]:
        headers = super()._headers()
        self._token = self.grafana.read_token().get_secret_value()
        register_secret(self._token)
        headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def _translate(self, what: str, failure: http_bounded.ReadFailed) -> MetricsUnavailable:
        where = f"grafana datasource {self.grafana.datasource_uid} at {strip_userinfo(self.grafana.url)} {what}"
        if failure.kind == "http-status":
            status = failure.status or 0
            reason = STATUS_REASONS.get(status, "grafana-http-error")
            detail = {
                "grafana-token-rejected": "Grafana refused the service-account token",
                "grafana-datasource-not-found": "Grafana has no datasource with this UID",
                "grafana-datasource-down": "Grafana could not reach the datasource",
            }.get(reason, "Grafana answered an error")
            error = GrafanaUnavailable(reason, f"{where}: HTTP {status or '?'}: {detail}")  # its body is not repeated
        elif failure.kind in ("deadline", "connection"):
            kind = "timed out" if failure.kind == "deadline" else "connection failed"
            error = GrafanaUnavailable("grafana-unreachable", f"{where}: {kind}")
        elif failure.kind in ("too-large", "too-many"):
            return MetricsUnavailable(f"{where}: the answer is too large ({failure.describe()})", kind=failure.kind)
        else:  # a 200 that is not Prometheus JSON, or nested too deep to read
            return MetricsUnavailable(
                f"{where}: the answer is not Prometheus JSON ({failure.describe()})", kind=failure.kind
            )
        error.kind = failure.kind
        return error


def metrics_source(
    prometheus: PrometheusSettings, grafana: GrafanaSettings | None, *, slo: SLO | None = None
) -> PrometheusMetrics:
    """The operator's MetricsSource: through Grafana's proxy when a datasource UID is set, else Prometheus."""
    if grafana is not None and grafana.datasource_uid is not None:
        return GrafanaMetrics(grafana, prometheus, slo=slo)
    return PrometheusMetrics(prometheus, slo=slo)
