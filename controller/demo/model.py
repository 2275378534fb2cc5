"""The values the demo's parts share: its settings and one point of the simulated day's timeline."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True)
class DemoSettings:
    out_dir: Path = Path("out/demo")
    seed: int = 7
    policy_path: Path = Path("policies/v1/hybrid-mtp-workstation.yaml")
    model: str = "nemotron-3-super-fp8"
    gpu: str = "gb300-dgx-station"
    traffic_profile: str = "coding-agents"
    hours: float = 24.0
    cycle_s: float = 300.0
    """Seconds of simulated time between two control cycles."""
    cold_start_s: float = 180.0
    bake_s: float = 600.0
    min_samples: int = 100
    api_input_usd_per_million: float = 0.30
    api_output_usd_per_million: float = 1.20
    """An illustrative API price for the same class of model, to compare self-hosting against."""


@dataclass(frozen=True)
class TimelinePoint:
    at: datetime
    concurrency: float
    arrival_rate: float
    prompt_mean: float
    output_mean: float
    tokens_per_s: float
    stock_tokens_per_s: float
    requests: int
    good_requests: int
    candidate_weight: int
    stable_config: str
    phase: str
    gpu_seconds: float
    output_tokens: float
    prompt_tokens: float
    replicas: int
