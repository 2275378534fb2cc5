"""Scenario: the week benchmark's ``doc-quoting`` fleet (a 27B hybrid MTP model, 4-bit, on RTX 3090s, the
``chat-quoting`` traffic profile): chat by day, document quoting by night, where a long lookup draft decodes one
stream several-fold faster and costs on the day's fresh text (field note 2)."""

from __future__ import annotations

from pathlib import Path

from controller.decide import scaled
from controller.domain.config import STOCK, EngineConfig
from controller.policy import load_policy
from controller.simulator.perf import PerformanceModel
from controller.simulator.profiles import load_gpu, load_model
from controller.simulator.traffic.diurnal import DiurnalTraffic

POLICY = Path(__file__).resolve().parents[2] / "policies" / "v1" / "doc-quoting-3090.yaml"
LOOKUP = EngineConfig(speculative_method="ngram", num_speculative_tokens=8)


def test_chat_by_day_copied_documents_by_night() -> None:
    traffic = DiurnalTraffic.week(7, "chat-quoting")
    day = traffic.shape_at_hour(13, noise=False)
    night = traffic.shape_at_hour(3, noise=False)
    assert day.concurrency > 4 * night.concurrency
    assert day.repetitiveness < 0.1 < 0.9 < night.repetitiveness
    assert night.prompt_tokens.mean > 5 * day.prompt_tokens.mean
    saturday = traffic.shape_at_hour(13, day_of_week=5, noise=False)
    assert saturday.concurrency < day.concurrency


def test_a_long_lookup_draft_pays_several_fold_on_quoted_text_and_costs_on_fresh_text() -> None:
    traffic = DiurnalTraffic.week(7, "chat-quoting")
    perf = PerformanceModel(load_model("qwen3.6-27b-int4"), load_gpu("rtx-3090"))

    def one_stream(config: EngineConfig, hour: float) -> float:
        shape = traffic.shape_at_hour(hour, noise=False)
        return perf.estimate(config, scaled(shape, 1 / shape.concurrency)).output_tokens_per_s

    assert one_stream(LOOKUP, 3) > 3 * one_stream(STOCK, 3)
    assert one_stream(LOOKUP, 13) < one_stream(EngineConfig(speculative_method="mtp", num_speculative_tokens=2), 13)


def test_the_policy_targets_the_scenario_and_offers_lookup_drafts() -> None:
    policy = load_policy(POLICY).for_target(model="qwen3.6-27b-int4", gpu="rtx-3090")
    assert "ngram" in policy.space.speculative_method
    assert policy.slo.tpot_percentile == 99
