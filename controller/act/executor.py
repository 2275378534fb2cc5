"""The act executor: one handler per action type, run in the decided order; effects out, status untouched.

Each handler acts only through the ports and returns effects (:mod:`controller.act.effects`); after each action the
executor leaves its Kubernetes Event (best effort). A failed port call raises :class:`ActInterrupted` (a
:class:`TemporaryError`) carrying the effects the earlier actions produced and the actions not yet done: the caller
keeps those effects (a started trial, a deployed candidate) and retries only the rest, never the done part.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, get_args

from controller.act import approvals, deployments, notify, routing, trials
from controller.act.context import ActContext, ActPorts, TrialSettings
from controller.act.effects import Effect, TrialStarted, Withheld, with_code
from controller.act.guard import HARMLESS, Promises, guard, notice
from controller.domain.actions import (
    Action,
    DeployCandidate,
    Notify,
    Promote,
    RequestApproval,
    Rollback,
    RunTrial,
    Scale,
    SetWeights,
)
from controller.domain.observation import TargetRef
from controller.errors import PermanentError, TemporaryError

log = logging.getLogger(__name__)

Handler = Callable[[Any, ActContext], tuple[Effect, ...]]
"""``handler(action, ctx) -> effects`` for one action type."""

HANDLERS: Mapping[type[Any], Handler] = {
    RunTrial: trials.run_trial,
    SetWeights: routing.set_weights,
    DeployCandidate: deployments.deploy_candidate,
    Scale: deployments.scale,
    Promote: deployments.promote,
    Rollback: deployments.rollback,
    Notify: notify.notify,
    RequestApproval: approvals.request_approval,
}

ACTION_TYPES: tuple[type[Any], ...] = get_args(Action)

#: Moves of a rollout a notification tells of ("Rollout at 25%", "Rollback"): when one is withheld, the notifications
#: after it say it was not done. A replica count follows the load and tells no one.
ROLLOUT_MOVES: tuple[type[Any], ...] = (DeployCandidate, SetWeights, Promote, Rollback)


class ActInterrupted(TemporaryError):
    """A port call failed part-way through a plan: ``effects`` of the actions done before it, ``remaining`` the
    failed action and those after it, ``cause`` the adapter's error (its retry delay is this one's)."""

    def __init__(self, cause: TemporaryError, effects: tuple[Effect, ...], remaining: tuple[Action, ...]) -> None:
        super().__init__(str(cause), delay_s=cause.delay_s)
        self.cause = cause
        self.effects = effects
        self.remaining = remaining


class Executor:
    """Runs a plan's actions through their handlers. Refuses to start when an action type has no handler."""

    def __init__(
        self, ports: ActPorts, trial_settings: TrialSettings, *, handlers: Mapping[type[Any], Handler] = HANDLERS
    ) -> None:
        missing = [t.__name__ for t in ACTION_TYPES if t not in handlers]
        if missing:
            raise PermanentError(f"no act handler for action type(s): {', '.join(missing)}")
        self.ports = ports
        self.trial_settings = trial_settings
        self.handlers = dict(handlers)

    def execute(
        self, target: TargetRef, actions: Sequence[Action], promises: Promises | None = None
    ) -> tuple[Effect, ...]:
        """Apply the actions in order, each exactly as decided (no argument is second-guessed here), except that a
        production change ``promises`` forbid (dry run, a paused or rejected rollout, an approval not given) is
        withheld (:func:`~controller.act.guard.guard`): its handler does not run, its Event and its
        :class:`Withheld` effect say what it would have done, and the notifications that follow a withheld move of
        the rollout (deploy, weights, promote, rollback; up to the next change that runs) go out marked as not done.

        Raises :class:`ActInterrupted` when one fails with a :class:`TemporaryError`: what the actions before it
        produced is not lost with it."""
        ctx = ActContext(target, self.ports, self.trial_settings)
        kept = promises or Promises()
        effects: list[Effect] = []
        withheld: Withheld | None = None  # the last withheld move of the rollout: the notifications after it tell of it
        for index, action in enumerate(actions):
            verdict = guard(action, kept)
            if isinstance(verdict, Withheld):
                log.info("%s: withheld %s: %s", target, verdict.action, verdict.would)
                effects.append(verdict)
                effects.append(with_code(notify.record_withheld(verdict, ctx), verdict.code))
                withheld = verdict if isinstance(action, ROLLOUT_MOVES) else withheld
                continue
            if isinstance(action, Notify) and withheld is not None:
                action = notice(action, withheld)
            elif not isinstance(action, HARMLESS):
                withheld = None
            log.info("%s: %s: %s", target, type(action).__name__, action.reason)
            handler = self.handlers.get(type(action))
            if handler is None:  # a type outside the Action union (checked at start-up for all of it)
                raise PermanentError(f"no act handler for action type {type(action).__name__}")
            try:
                produced = handler(action, ctx)
            except ActInterrupted:
                raise
            except TemporaryError as exc:
                raise ActInterrupted(exc, tuple(effects), tuple(actions[index:])) from exc
            effects.extend(with_code(e, action.code) for e in produced)
            effects.append(with_code(notify.record_event(action, ctx), action.code))
        return tuple(effects)

    def poll(self, effects: Sequence[Effect]) -> tuple[Effect, ...]:
        """``effects`` with each trial still running polled once: finished ones become their ``TrialRecorded``."""
        return tuple(trials.landed(e, self.trial_settings) if isinstance(e, TrialStarted) else e for e in effects)


def running(effects: Sequence[Effect]) -> list[TrialStarted]:
    """The trials among ``effects`` that are still running."""
    return [e for e in effects if isinstance(e, TrialStarted)]
