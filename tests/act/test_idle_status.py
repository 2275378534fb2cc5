"""An idle cycle whose only change is the live traffic sentence of its observing reason leaves the status as it was
(nothing to write); any other change is stamped."""

from __future__ import annotations

from datetime import UTC, datetime

from controller.domain.phases import Phase
from controller.domain.status import Reason, TargetStatus
from controller.reconcile import stamped

T0, T1 = datetime(2026, 1, 5, 10, tzinfo=UTC), datetime(2026, 1, 5, 10, 5, tzinfo=UTC)


def _status(*reasons: Reason, phase: Phase = Phase.OBSERVING) -> TargetStatus:
    return TargetStatus(phase=phase, last_reasons=reasons, updated_at=T0)


def _observing(rate: str) -> Reason:
    return Reason(code="observing", message=f"observing: {rate} req/s, 6 concurrent; drift in tune: distance 0.0")


def test_only_the_traffic_sentence_moved_so_the_status_is_kept() -> None:
    before = _status(_observing("0.07"))
    after = _status(_observing("0.06")).model_copy(update={"updated_at": T1})
    assert stamped(before, after, T1) is before


def test_only_the_replica_sentence_moved_while_observing_so_the_status_is_kept() -> None:
    def kept(rate: str) -> Reason:
        return Reason(code="replicas-kept-observing", message=f"keep 1: load {rate} req/s x 1.25 headroom = 1")

    before = _status(kept("0.07"), _observing("0.07"))
    after = _status(kept("0.06"), _observing("0.06")).model_copy(update={"updated_at": T1})
    assert stamped(before, after, T1) is before


def test_another_reason_or_field_is_a_change_and_is_stamped() -> None:
    before = _status(_observing("0.07"))
    scaled = _status(Reason(code="scale", message="scale up to 2 replicas"))
    assert stamped(before, scaled, T1).updated_at == T1
    moved_phase = _status(_observing("0.06"), phase=Phase.TRIALLING)
    result = stamped(before, moved_phase, T1)
    assert result.phase is Phase.TRIALLING and result.updated_at == T1
    assert result.last_reasons == moved_phase.last_reasons  # with a real change the sentence is refreshed too
