"""Trials: start each decided trial through the load tester and collect its result, without blocking the cycle.

A load tester that implements :class:`~controller.ports.TrialStarter` runs trials in the background: the handler
returns :class:`TrialStarted` and a later cycle polls it (:func:`poll`). A plain ``run``-only load tester completes
inside the handler and the result is recorded in the same cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.act.context import ActContext, TrialSettings
from controller.act.effects import Effect, TrialRecorded, TrialStarted
from controller.domain.actions import RunTrial
from controller.domain.observation import TargetRef
from controller.domain.trial import TrialResult, TrialStatus
from controller.errors import ShiftlightError
from controller.ports import TrialHandle, TrialRequest, TrialStarter


@dataclass(frozen=True)
class CompletedTrial:
    """The handle of a trial that finished before its start returned."""

    result: TrialResult

    def poll(self) -> TrialResult | None:
        return self.result


def request_for(action: RunTrial, target: TargetRef, settings: TrialSettings) -> TrialRequest:
    """The trial exactly as decided: its config, shape, loop, whether it must be measured afresh (a repeat), why and
    on whose proposal; the policy's SLO, budget (stretched to the shape's steady state) and seed."""
    return TrialRequest(
        target=target,
        config=action.config,
        shape=action.shape,
        slo=settings.slo,
        budget=settings.budget.for_shape(action.shape),
        seed=settings.seed,
        loop=action.loop,
        fresh=action.repeat,
        reason=action.reason,
        proposed_by=action.proposed_by,
    )


def failed(action: RunTrial, settings: TrialSettings, exc: ShiftlightError) -> TrialResult:
    """A load tester must not raise; if one does, the failure is data."""
    return TrialResult(
        config=action.config,
        shape=action.shape,
        slo=settings.slo,
        status=TrialStatus.FAILED,
        reason=f"load tester error: {exc}",
    )


def run_trial(action: RunTrial, ctx: ActContext) -> tuple[Effect, ...]:
    request = request_for(action, ctx.target, ctx.trials)
    tester = ctx.ports.load_tester
    handle: TrialHandle
    try:
        handle = tester.start(request) if isinstance(tester, TrialStarter) else CompletedTrial(tester.run(request))
    except ShiftlightError as exc:
        handle = CompletedTrial(failed(action, ctx.trials, exc))
    return (landed(TrialStarted(action, handle), ctx.trials),)


def landed(started: TrialStarted, settings: TrialSettings) -> TrialStarted | TrialRecorded:
    """Poll a started trial once: its :class:`TrialRecorded` when it has finished, else ``started`` unchanged."""
    try:
        result = started.handle.poll()
    except ShiftlightError as exc:
        result = failed(started.action, settings, exc)
    return started if result is None else TrialRecorded(started.action, result)
