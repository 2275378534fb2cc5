"""Following TunedServices over time: ``shiftctl get -w`` (the table, then a row per change) and
``shiftctl status NAME --timeout`` (wait until Healthy or Degraded, for CI, as ``kubectl argo rollouts status``).

Both poll the API server through an injected ``fetch`` and wait through an injected ``sleep``/``now``, so tests
drive them without waiting. A change is a new ``resourceVersion`` (every write bumps it)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from controller.cli.shiftctl.render import parsed
from controller.domain.phases import Phase
from controller.domain.text import one_line

JSON = dict[str, Any]

#: Seconds between two reads while following.
DEFAULT_INTERVAL_S = 2.0

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def parse_duration(text: str) -> float:
    """Seconds of a kubectl-style duration (``90``, ``30s``, ``5m``, ``1h30m``, ``500ms``); ValueError otherwise."""
    value = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        return float(value)
    m = _DURATION.fullmatch(value)
    if not value or m is None or not any(m.groups()):
        raise ValueError(f"invalid duration {text!r} (use e.g. 90s, 5m, 1h30m)")
    h, mins, s, ms = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mins * 60 + s + ms / 1000


# ----- status --------------------------------------------------------------------------------------------------


class Health(StrEnum):
    """A TunedService's health for CI: Healthy (settled on a config, nothing in flight), Degraded (rolled back,
    frozen or invalid) or Progressing (tuning, waiting for approval, rolling out or paused)."""

    HEALTHY = "Healthy"
    DEGRADED = "Degraded"
    PROGRESSING = "Progressing"


#: The exit code of ``shiftctl status`` for each outcome; a timeout while Progressing exits 2.
EXIT_CODES: Mapping[Health, int] = {Health.HEALTHY: 0, Health.DEGRADED: 1, Health.PROGRESSING: 2}


def health(body: Mapping[str, Any]) -> tuple[Health, str]:
    """``(health, why)`` of a TunedService body, from its phase and conditions."""
    _spec, status, error = parsed(body)
    if status is None:
        return Health.DEGRADED, f"invalid object: {error.splitlines()[0] if error else ''}"
    phase = status.phase
    last = status.last_reasons[-1].message if status.last_reasons else ""
    if phase is Phase.FROZEN:
        return Health.DEGRADED, f"Frozen: {status.frozen_reason or last}"
    if phase is Phase.ROLLED_BACK or (status.rollout is not None and status.rollout.abort_requested):
        return Health.DEGRADED, f"{phase.value}: {(status.rollout.abort_reason if status.rollout else '') or last}"
    if phase is Phase.OBSERVING:
        return Health.HEALTHY, f"Observing on {status.active_config.label()}"
    if status.rollout is not None:
        r = status.rollout
        where = f"{r.from_config.label()} -> {r.to_config.label()} at {r.weight}%"
        return Health.PROGRESSING, f"{phase.value}: {where}" + (" (paused)" if r.paused else "")
    return Health.PROGRESSING, f"{phase.value}: {last}" if last else phase.value


def wait_for_health(
    fetch: Callable[[], Mapping[str, Any]],
    emit: Callable[[str], None],
    *,
    timeout_s: float | None,
    interval_s: float = DEFAULT_INTERVAL_S,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.monotonic,
) -> tuple[Health, bool]:
    """Poll until Healthy or Degraded, or until ``timeout_s`` passed (None: no limit; 0: one look). Emits a line
    each time the health or its reason changes. Returns ``(health, timed_out)``."""
    started = now()
    said = ""
    while True:
        state, why = health(fetch())
        line = one_line(f"{state.value} - {why}")
        if line != said:
            emit(line)
            said = line
        if state is not Health.PROGRESSING:
            return state, False
        if timeout_s is not None and now() - started >= timeout_s:
            return state, True
        sleep(interval_s)


# ----- get -w --------------------------------------------------------------------------------------------------


def _key(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata", {})
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _rv(body: Mapping[str, Any]) -> str:
    return str(body.get("metadata", {}).get("resourceVersion", ""))


def watch_changes(
    fetch: Callable[[], list[JSON]],
    emit: Callable[[Sequence[JSON], bool], None],
    *,
    timeout_s: float | None = None,
    interval_s: float = DEFAULT_INTERVAL_S,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.monotonic,
    polls: int | None = None,
) -> int:
    """``get -w``: emit the whole list once (with the header: ``emit(items, True)``), then, on each poll, the
    objects whose resourceVersion changed (``emit(changed, False)``), until ``timeout_s`` passed or ``polls`` polls
    were made (None: no limit). Returns the number of changed rows emitted."""
    started = now()
    items = fetch()
    emit(items, True)
    seen = {_key(b): _rv(b) for b in items}
    shown = 0
    done = 0
    while (polls is None or done < polls) and (timeout_s is None or now() - started < timeout_s):
        sleep(interval_s)
        done += 1
        changed = [b for b in fetch() if seen.get(_key(b)) != _rv(b)]
        for b in changed:
            seen[_key(b)] = _rv(b)
        if changed:
            emit(changed, False)
            shown += len(changed)
    return shown


__all__ = [
    "DEFAULT_INTERVAL_S",
    "EXIT_CODES",
    "Health",
    "health",
    "parse_duration",
    "wait_for_health",
    "watch_changes",
]
