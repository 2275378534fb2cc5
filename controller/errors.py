"""Shiftlight's error tree: every error Shiftlight raises on purpose, with the module that defines it when that is
not this one (``tests/test_errors_tree.py`` checks the drawing against the classes).

    ShiftlightError
    ├── TemporaryError(delay_s)             retry later; the world may fix itself
    │   ├── MetricsUnavailable              Prometheus down, slow, empty, NaN or partial
    │   │   └── GrafanaUnavailable          observe.grafana_proxy: metrics could not be read through Grafana
    │   ├── AdvisorUnavailable              the LLM endpoint failed or timed out
    │   ├── ClusterConflict                 a write lost a race (HTTP 409/422); re-read and retry
    │   ├── KubeUnavailable                 adapters.kube.client: the API server unreachable or answering 5xx
    │   ├── ActInterrupted                  act.executor: a port call failed part-way through a plan
    │   └── BenchFailed                     trials.loadgen.vllm_bench: ``vllm bench serve`` produced no result
    ├── PermanentError                      retrying the same input cannot help
    │   ├── InvalidInput(source, field)     a CR, policy file, CLI argument or answer failed validation
    │   │   ├── PolicyError                 policy.loading: a policy file failed to parse or validate
    │   │   └── SimulatorRefusal            reactor.simulator_backend: no profile for the spec's model or GPU
    │   ├── InvalidTransition               the phase table forbids this move
    │   ├── NotFound                        the named object does not exist
    │   ├── KubeForbidden                   adapters.kube.client: RBAC refused the request (HTTP 403)
    │   └── KubeUnauthorized                adapters.kube.client: the credentials were not accepted (HTTP 401)
    └── LoadClientFailed                    trials.loadgen.process: the load generator delivered no valid report

Adapters translate third-party exceptions into these at their boundary; the domain never sees an
``httpx`` or ``kubernetes`` exception.
"""

from __future__ import annotations


class ShiftlightError(Exception):
    """Base of every error Shiftlight raises on purpose."""


class TemporaryError(ShiftlightError):
    def __init__(self, message: str, *, delay_s: float = 30.0) -> None:
        super().__init__(message)
        self.delay_s = delay_s


class PermanentError(ShiftlightError):
    pass


class MetricsUnavailable(TemporaryError):
    """``kind`` (optional) says how a read failed, machine-readable: ``deadline``, ``connection``, ``too-large``,
    ``http-status``, ``malformed``, ``too-deep``, ``too-many`` (see :mod:`controller.http_bounded`)."""

    def __init__(self, message: str, *, delay_s: float = 30.0, kind: str = "") -> None:
        super().__init__(message, delay_s=delay_s)
        self.kind = kind


class AdvisorUnavailable(TemporaryError):
    pass


class ClusterConflict(TemporaryError):
    pass


class InvalidInput(PermanentError):
    """Input from outside failed validation. ``source`` names the file/object, ``field`` the offending path."""

    def __init__(self, message: str, *, source: str = "", field: str = "") -> None:
        where = ":".join(p for p in (source, field) if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.source = source
        self.field = field


class InvalidTransition(PermanentError):
    pass


class NotFound(PermanentError):
    pass
