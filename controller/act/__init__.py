"""Act: the executor runs each decided action through its handler and returns effects; the cycle folds them.

| action                          | handler                                   |
|---------------------------------|-------------------------------------------|
| SetWeights                      | :mod:`controller.act.routing`             |
| DeployCandidate, Scale, Promote, Rollback | :mod:`controller.act.deployments` |
| RunTrial                        | :mod:`controller.act.trials`              |
| Notify (and every action's Event) | :mod:`controller.act.notify`            |
| RequestApproval                 | :mod:`controller.act.approvals`           |

Before any handler that changes production, the executor asks :func:`controller.act.guard.guard`: dry run, a paused
or rejected rollout and an approval not given withhold the change, whatever decided it (a :class:`Withheld` effect,
an Event and a status reason say what it would have done).

This package imports only the domain, the ports and the errors.
"""

from controller.act.context import ActContext, ActPorts, TrialSettings
from controller.act.executor import HANDLERS, ActInterrupted, Executor, running
from controller.act.fold import fold
from controller.act.guard import Promises

__all__ = [
    "HANDLERS",
    "ActContext",
    "ActInterrupted",
    "ActPorts",
    "Executor",
    "Promises",
    "TrialSettings",
    "fold",
    "running",
]
