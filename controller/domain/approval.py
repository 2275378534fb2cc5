"""Who approves a rollout, in one place: the approval modes and the rule that says whether a config waits for a
human. The policy (``approval:``), the TunedService spec (``approvalMode``) and the decide layer's rules all use
these. Pure."""

from __future__ import annotations

from typing import Literal

ApprovalMode = Literal["auto", "manual", "manual-for-lossy"]
"""``auto``: roll out without a human; ``manual``: every rollout waits for ``shiftctl approve``;
``manual-for-lossy``: only configs that may change outputs (e.g. lower-precision caches) wait."""


def needs_approval(mode: ApprovalMode, *, lossy: bool) -> bool:
    """Whether a rollout of a config waits for ``shiftctl approve`` under ``mode`` (``lossy``: the config may change
    the model's outputs)."""
    return mode == "manual" or (mode == "manual-for-lossy" and lossy)


__all__ = ["ApprovalMode", "needs_approval"]
