"""Act: the executor runs each decided action through its handler and returns effects; the cycle folds them.

| action                          | handler                                   |
|---------------------------------|-------------------------------------------|
| SetWeights                      | :mod:`controller.act.routing`             |
| DeployCandidate, Scale, Promote, Rollback | :mod:`controller.act.deployments` |
| RunTrial                        | :mod:`controller.act.trials`              |
| Notify (and every action's Event) | :mod:`controller.act.notify`            |
| RequestApproval                 | :mod:`controller.act.approvals`           |

This package imports only the domain, the ports and the errors.
"""

from controller.act.context import ActContext, ActPorts, TrialSettings
from controller.act.executor import HANDLERS, ActInterrupted, Executor, running
from controller.act.fold import fold

__all__ = ["HANDLERS", "ActContext", "ActInterrupted", "ActPorts", "Executor", "TrialSettings", "fold", "running"]
