"""Persisted state of a tuned service. It lives in the CR status, never only in process memory, so a
restarted operator resumes mid-rollout with its approvals intact. The rollout's own record (its steps, approvals
and analyses) is :mod:`controller.domain.rollout`."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from controller.domain.codes import Code, StoredCode, code_or_none
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.profile import TrafficProfile
from controller.domain.rollout import RolloutState
from controller.domain.scrub import scrub_known
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult


def stored_code(value: object) -> tuple[Code | None, str]:
    """A stored code read back: the :class:`Code` it spells, and the spelling when it spells none (``""``: it
    does, or there was none). The empty string, stored before codes were optional, is no code."""
    if value is None or isinstance(value, Code):
        return value, ""
    text = str(value)
    code = code_or_none(text)
    return code, "" if code is not None or not text else text


def _kept(message: object, unknown: str) -> object:
    """``message`` with an ``unknown`` code's spelling kept in front of it, so no stored text is lost."""
    if not unknown:
        return message
    return f"[{unknown}] {message}" if isinstance(message, str) and message else f"[{unknown}]"


class DriftState(BaseModel):
    """What the drift detector remembers between cycles."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    drifted: bool = False
    pending_since: datetime | None = Field(
        default=None, description="when the distance first crossed the threshold that would flip the verdict"
    )
    changed_at: datetime | None = None
    last_distance: float | None = None


class ScheduledConfig(BaseModel):
    """The config chosen for one time-of-day window, with why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window: str
    config: EngineConfig
    shape: TrafficShape
    goodput_tokens_per_s: float = Field(ge=0)
    stock_goodput_tokens_per_s: float = Field(ge=0)
    replicas: int = Field(default=1, ge=0)
    reason: str = ""
    tuned_at: datetime | None = None
    capacity_rps: float | None = Field(
        default=None, ge=0, description="requests/s one replica of this config sustains within the SLO (probed)"
    )
    capacity_concurrency: float | None = Field(
        default=None,
        ge=0,
        description="concurrent requests one replica of this config carries within the SLO (probed)",
    )
    fleet_rate_rps: float | None = Field(
        default=None, ge=0, description="the whole fleet's arrival rate when the window was tuned"
    )

    @property
    def gain(self) -> float:
        return self.goodput_tokens_per_s / self.stock_goodput_tokens_per_s if self.stock_goodput_tokens_per_s else 0.0


class ServedConfig(BaseModel):
    """A config production served in one window after a rollout that passed, with its evidence: the canary trial
    that measured it on the window's traffic and the rollout's analysed steps. Two configs served this way in the
    windows a switch moves between are swapped without a full analysed rollout (``pre-validated-swap``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window: str = Field(min_length=1)
    config: EngineConfig
    promoted_at: datetime
    rollout_id: str = Field(min_length=1, description="the rollout that promoted it")
    analysed_steps: int = Field(ge=1, description="the rollout's steps whose analysis passed")
    canary_goodput_tokens_per_s: float | None = Field(
        default=None, ge=0, description="the canary trial's goodput on the window's traffic, when one measured it"
    )
    cold_start_s: float | None = Field(
        default=None, gt=0, description="the engine's cold start its canary trials measured, when they reported one"
    )


class MeasuredNoise(BaseModel):
    """How much two measurements of one config on one shape differ: the relative standard deviation of a trial's
    goodput (in log space), from the repeats a tuning round runs of its baseline."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    relative: float = Field(ge=0, description="relative standard deviation of one measurement (log space)")
    repeats: int = Field(ge=1, description="repeated measurements the figure rests on")
    round_id: str = ""
    measured_at: datetime | None = None


def _stop_code(value: object) -> object:
    """A stored stop code no :class:`Code` spells (written by another version of the operator) reads as
    ``search-stopped``: the search did stop, and ``stop_reason`` keeps its sentence. ``""`` is none."""
    if isinstance(value, str) and not isinstance(value, Code):
        code, unknown = stored_code(value)
        return Code.SEARCH_STOPPED if unknown else code
    return value


class TuningRound(BaseModel):
    """One search for a better config for one window's traffic shape."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    window: str
    shape: TrafficShape
    started_at: datetime
    reason: str
    trial_keys: tuple[str, ...] = Field(default=(), description="config keys trialled in this round, in order")
    trial_proposers: tuple[str, ...] = Field(default=(), description="who proposed each trial (agent, optimizer, ...)")
    trial_reasons: tuple[str, ...] = Field(default=(), description="why each trial was run")
    probe_key: str | None = Field(default=None, description="config key of the capacity probe, once requested")
    fleet_concurrency: float | None = Field(
        default=None, ge=0, description="the whole fleet's requests in flight the round was tuned for"
    )
    probe_factors: tuple[float, ...] = Field(
        default=(), description="multiples of the round's load the capacity probe has replayed, in order"
    )
    fleet_rate_rps: float | None = Field(
        default=None, ge=0, description="the whole fleet's arrival rate the round was tuned for"
    )
    stop_code: Annotated[StoredCode | None, BeforeValidator(_stop_code)] = Field(
        default=None, description="why the round's search stopped asking for trials (a reason code), once it has"
    )
    stop_reason: str | None = Field(default=None, description="the same, as a sentence")

    def proposer_of(self, config_key: str) -> str:
        for key, who in zip(self.trial_keys, self.trial_proposers, strict=False):
            if key == config_key:
                return who
        return "unknown"


class BlockedConfig(BaseModel):
    """A config rolled back in production, and the window whose traffic it failed on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(min_length=1)
    window: str = Field(min_length=1)


class Rejection(BaseModel):
    """A rollout a human rejected (``shiftctl reject``): who, when, the config and the window it was for, and the
    traffic the window had then. The config is not proposed for that window again until the window's traffic
    drifts from ``shape`` or the policy's rejection memory has passed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    by: str = Field(min_length=1)
    at: datetime
    config_key: str = Field(min_length=1)
    config_label: str = ""
    window: str = Field(min_length=1)
    shape: TrafficShape | None = Field(default=None, description="the window's traffic shape when it was rejected")
    comment: str = ""
    rollout_id: str = ""


class ScheduleAccount(BaseModel):
    """The schedule's running account over a week: the GPU-hours production ran (candidates included) against
    what the best static config Shiftlight measured would have run for the same load, and the static fallback a
    losing week leads to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    since: datetime = Field(description="the start of the week being counted")
    updated_at: datetime = Field(description="the last cycle counted")
    realised_gpu_s: float = Field(default=0.0, ge=0, description="GPU-seconds production ran, candidates included")
    static_gpu_s: float = Field(
        default=0.0,
        ge=0,
        description="GPU-seconds the best static config measured would have run for the same load (the realised "
        "figure where none is measured)",
    )
    static_config: EngineConfig | None = Field(
        default=None, description="the best static config measured: the fewest GPU-hours a day on every window"
    )
    fallback_config: EngineConfig | None = Field(
        default=None, description="the static config served instead of the schedule after a losing week"
    )
    fallback_until: datetime | None = None
    fallback_reason: str | None = None

    def falls_back(self, now: datetime) -> bool:
        """Whether the schedule is set aside for a static config at ``now``."""
        return self.fallback_config is not None and self.fallback_until is not None and now < self.fallback_until


class Reason(BaseModel):
    """One reason the last cycle gave: its machine-readable code (controller/domain/codes.py) and the sentence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: StoredCode | None = Field(
        default=None, description="machine-readable reason code (e.g. step, slo-breach, scale), if it has one"
    )
    message: Annotated[str, AfterValidator(scrub_known)]  # tenants read it: no operator credential, no URL userinfo

    @model_validator(mode="before")
    @classmethod
    def _known_code(cls, data: object) -> object:
        """A stored code no :class:`Code` spells (or ``""``) reads as none; an unknown one's spelling is kept in
        front of the message."""
        if isinstance(data, dict) and "code" in data:
            code, unknown = stored_code(data["code"])
            data = {**data, "code": code}
            if unknown:
                data["message"] = _kept(data.get("message"), unknown)
        return data


def _reasons(value: object) -> object:
    """Reasons stored before they carried codes were plain sentences."""
    if isinstance(value, list | tuple):
        return tuple({"message": v} if isinstance(v, str) else v for v in value)
    return value


class TargetStatus(BaseModel):
    """Everything the operator must remember about one target between cycles."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    phase: Phase = Phase.OBSERVING
    active_config: EngineConfig = STOCK
    tuned_shape: TrafficShape | None = None
    rollout: RolloutState | None = None
    tuning: TuningRound | None = None
    window: str | None = Field(default=None, description="the time-of-day window the last cycle ran in")
    replicas: int = Field(default=1, ge=0, description="replicas of the stable variant")
    trials: tuple[TrialResult, ...] = ()
    schedule: tuple[ScheduledConfig, ...] = ()
    last_reasons: Annotated[tuple[Reason, ...], BeforeValidator(_reasons)] = Field(
        default=(), description="the last cycle's reasons, each with its code and message"
    )
    frozen_reason: str | None = None
    history: tuple[str, ...] = Field(default=(), description="one line per finished rollout or rollback")
    drift: DriftState = Field(default_factory=DriftState)
    scale_below_since: datetime | None = None
    reactive_scale_at: datetime | None = Field(
        default=None, description="when replicas were last added on an SLO breach without a probed capacity"
    )
    replicas_changed_at: datetime | None = Field(
        default=None, description="when Shiftlight last changed the stable variant's replica count"
    )
    last_switch_at: datetime | None = None
    last_digest_on: date | None = None
    profile: TrafficProfile | None = Field(
        default=None, description="hour-of-week traffic profile, kept so a restart does not re-query weeks of data"
    )
    tuning_paused_until: datetime | None = None
    tuning_paused_reason: str | None = None
    blocked_configs: tuple[str, ...] = Field(
        default=(),
        description="keys of configs never chosen again automatically in any window (rollbacks recorded before "
        "rollbacks were kept per window)",
    )
    blocked_in_windows: tuple[BlockedConfig, ...] = Field(
        default=(),
        description="configs rolled back in production, each with the window whose traffic it failed on: never "
        "chosen again automatically for that window",
    )
    noise: MeasuredNoise | None = Field(
        default=None, description="the measurement noise the latest tuning round measured from its repeats"
    )
    searches: tuple[ScheduledConfig, ...] = Field(
        default=(),
        description="earlier searches' outcomes per window, each on the shape it was searched at: a window whose "
        "traffic returns to one of them reuses it instead of searching again",
    )
    schedule_account: ScheduleAccount | None = Field(
        default=None,
        description="the schedule's realised GPU-hours this week against the best static config measured, and the "
        "static fallback after a losing week",
    )
    served: tuple[ServedConfig, ...] = Field(
        default=(),
        description="configs production served per window after a rollout that passed, with their canary and "
        "rollout evidence (the latest per window and config)",
    )
    rejections: tuple[Rejection, ...] = Field(
        default=(),
        description="rollouts a human rejected, each with its config and window: the config is not proposed for "
        "that window again until its traffic drifts or the policy's rejection memory passes (the latest 20)",
    )
    updated_at: datetime | None = None

    def served_in(self, window: str, config_key: str) -> ServedConfig | None:
        """The evidence that production served the config keyed ``config_key`` in ``window``, if any."""
        return next((s for s in reversed(self.served) if s.window == window and s.config.key() == config_key), None)

    def schedule_for(self, window: str) -> ScheduledConfig | None:
        return next((s for s in self.schedule if s.window == window), None)

    def blocked_for(self, window: str | None) -> frozenset[str]:
        """Keys of the configs not to choose for ``window``: rolled back on its traffic, or blocked everywhere."""
        return frozenset(self.blocked_configs) | {b.key for b in self.blocked_in_windows if b.window == window}

    def blocked_for_tuning(self, current_window: str | None) -> frozenset[str]:
        """:meth:`blocked_for` the window being tuned: the running round's, else ``current_window``."""
        return self.blocked_for(self.tuning.window if self.tuning is not None else current_window)
