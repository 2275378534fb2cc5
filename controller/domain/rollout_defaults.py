"""The rollout's default settings, in one place: the policy's ``rollout`` section and the decide layer's
:class:`~controller.decide.rules.RolloutRules` both take their defaults from here."""

from __future__ import annotations

from typing import Final, Literal

MissingDataAction = Literal["hold", "rollback"]
"""What a rollout step does when the analysis cannot judge the candidate (absent, NaN or infinite data, no candidate
requests): ``hold`` keeps the step where it is until the data is there; ``rollback`` rolls back once the step has
baked without usable data."""

STEPS: Final[tuple[int, ...]] = (5, 25, 50, 100)
BAKE_SECONDS: Final = 300.0
ANALYSIS_INTERVAL_SECONDS: Final = 60.0
MIN_SAMPLES: Final = 200
MAX_TTFT_REGRESSION: Final = 0.10
MAX_TPOT_REGRESSION: Final = 0.10
MAX_ERROR_RATE: Final = 0.01
MIN_GOODPUT_RATIO: Final = 0.98
SLO_HEADROOM: Final = 0.0
"""Off by default: a candidate slower than stable by more than the allowed ratio rolls back however far inside the
SLO it is (a policy sets ``rollout.thresholds.slo_headroom`` to waive the ratio far inside the SLO)."""
ON_MISSING_DATA: Final[MissingDataAction] = "hold"
REJECTION_MEMORY_SECONDS: Final = 7 * 86400.0
"""How long a config a human rejected for a window is not proposed for it again (unless its traffic drifts)."""
