"""The day/night schedule the switch and swap scenarios share: two windows, a day config with 512 slots, a night
config with n-gram speculation, and the night's long repetitive documents (one replica's share)."""

from __future__ import annotations

from controller.domain import EngineConfig, LengthDistribution, TimeWindow, TrafficShape

NIGHT = TimeWindow(name="night", start_hour=0, end_hour=8)
DAY = TimeWindow(name="day", start_hour=8, end_hour=24)
DAY_CONFIG = EngineConfig(max_num_seqs=512)
NIGHT_CONFIG = EngineConfig(speculative_method="ngram", num_speculative_tokens=4)
NIGHT_SHAPE = TrafficShape(
    arrival_rate_rps=1.0,
    concurrency=16,
    prompt_tokens=LengthDistribution(mean=24000),
    output_tokens=LengthDistribution(mean=1024),
    repetitiveness=0.85,
)
