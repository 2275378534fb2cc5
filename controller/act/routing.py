"""Traffic weights: the router sends the decided share to the candidate."""

from __future__ import annotations

from controller.act.context import ActContext
from controller.act.effects import Effect, WeightsSet
from controller.domain.actions import SetWeights


def set_weights(action: SetWeights, ctx: ActContext) -> tuple[Effect, ...]:
    ctx.ports.router.set_weight(ctx.target, action.candidate_weight)
    return (WeightsSet(action.candidate_weight),)
