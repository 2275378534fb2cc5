"""Shiftlight's domain: immutable values shared by every layer.

Nothing in this package performs I/O, reads the clock or imports an adapter.
"""

from controller.domain.actions import (
    Action,
    DeployCandidate,
    Notify,
    Plan,
    Promote,
    RequestApproval,
    Rollback,
    RunTrial,
    Scale,
    SetWeights,
    Severity,
)
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import Observation, TargetRef, VariantStats
from controller.domain.phases import VALID_TRANSITIONS, Phase, transition
from controller.domain.rollout import AnalysisRecord, Approval, RolloutState
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig, ServedConfig, TargetStatus, TuningRound
from controller.domain.traffic import LengthDistribution, TimeWindow, TrafficShape
from controller.domain.trial import Percentiles, QualityReport, SpecDecodeStats, TrialResult, TrialStatus

__all__ = [
    "SLO",
    "STOCK",
    "VALID_TRANSITIONS",
    "Action",
    "AnalysisRecord",
    "Approval",
    "DeployCandidate",
    "EngineConfig",
    "LengthDistribution",
    "Notify",
    "Observation",
    "Percentiles",
    "Phase",
    "Plan",
    "Promote",
    "QualityReport",
    "RequestApproval",
    "Rollback",
    "RolloutState",
    "RunTrial",
    "Scale",
    "ScheduledConfig",
    "ServedConfig",
    "SetWeights",
    "Severity",
    "SpecDecodeStats",
    "TargetRef",
    "TargetStatus",
    "TimeWindow",
    "TrafficShape",
    "TrialResult",
    "TrialStatus",
    "TuningRound",
    "VariantStats",
    "transition",
]
