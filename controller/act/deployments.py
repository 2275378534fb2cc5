"""Variants and replicas: deploy, scale, promote and roll back, each exactly as decided."""

from __future__ import annotations

import logging

from controller.act.context import ActContext
from controller.act.effects import CandidateDeployed, Effect, Promoted, RolledBack, Scaled
from controller.domain.actions import DeployCandidate, Promote, Rollback, Scale
from controller.errors import NotFound

log = logging.getLogger(__name__)


def deploy_candidate(action: DeployCandidate, ctx: ActContext) -> tuple[Effect, ...]:
    ctx.ports.cluster.deploy(ctx.target, "candidate", action.config, action.replicas)
    return (CandidateDeployed(action.config, action.replicas),)


def scale(action: Scale, ctx: ActContext) -> tuple[Effect, ...]:
    ctx.ports.cluster.scale(ctx.target, action.variant, action.replicas)
    return (Scaled(action.variant, action.replicas),)


def promote(action: Promote, ctx: ActContext) -> tuple[Effect, ...]:
    try:
        running = ctx.ports.cluster.promote(ctx.target)
    except NotFound:
        # a promote applied before a lost status write: the candidate is already the stable variant
        log.info("%s: candidate already promoted; treating Promote as done", ctx.target)
        return (Promoted(action.config, already=True),)
    return (Promoted(action.config, running=running),)


def rollback(action: Rollback, ctx: ActContext) -> tuple[Effect, ...]:
    """Traffic back to stable first, then the candidate goes."""
    ctx.ports.router.set_weight(ctx.target, 0)
    ctx.ports.cluster.retire(ctx.target, "candidate")
    return (RolledBack(),)
