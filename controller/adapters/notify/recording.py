"""Notifiers that keep what they are given (the demo's report, the simulator backend) or drop it (no channel
configured)."""

from __future__ import annotations

from controller.domain.actions import Notify
from controller.domain.observation import TargetRef

__all__ = ["NopNotifier", "RecordingNotifier"]


class RecordingNotifier:
    """Notifier that stores every ``(target, Notify)`` pair it is given."""

    def __init__(self) -> None:
        self.posted: list[tuple[TargetRef, Notify]] = []

    def post(self, target: TargetRef, notification: Notify) -> None:
        self.posted.append((target, notification))

    def titles(self) -> list[str]:
        return [n.title for _, n in self.posted]


class NopNotifier:
    """Notifier that drops everything (the default when no channel is configured)."""

    def post(self, target: TargetRef, notification: Notify) -> None:
        return None
