"""Replay a :class:`TrafficShape` against an OpenAI-compatible ``/v1/completions`` endpoint and measure each request.

Design choices (see ``docs/trials.md``):

- **Prompts are token ids.** vLLM's ``/v1/completions`` accepts ``prompt`` as a list of token ids, so a prompt of
  exactly N tokens needs no tokenizer in the operator: ids are drawn uniformly from ``token_id_range`` (which must
  lie inside the model's vocabulary and away from special tokens). Output length is forced with ``max_tokens``
  and ``ignore_eos``.
- **Lengths** are log-normal with the shape's mean and cv (``LengthDistribution.lognormal_params()``), rounded,
  capped by the distribution's ``maximum`` and by ``max_model_len``.
- **Repetitive share**: a ``shape.repetitiveness`` share of requests carry a prompt made of one short motif
  repeated, the kind of context a lookup drafter (ngram, suffix) can copy from. **Prefix share**: the first
  ``prefix_share`` of every prompt comes from one shared token sequence (prefix caching hits).
- **Arrivals**: open loop sends at Poisson (``burstiness == 1``) or gamma gaps with mean ``1 / rate``, the same
  process as ``vllm bench serve --request-rate R --burstiness B``; closed loop keeps ``concurrency`` requests in
  flight. The seed fixes everything that is planned: lengths, token ids, send times.
- **Measurement** is streamed: TTFT is the first chunk carrying a choice, ITL the gaps between later chunks, TPOT
  ``(e2e - ttft) / (output_tokens - 1)`` as in ``vllm bench``; token counts come from the final ``usage`` chunk.

The code lives in :mod:`controller.trials.loadgen.plan` (what is sent), :mod:`controller.trials.loadgen.report`
(what was measured), :mod:`controller.trials.loadgen.client` (the client, in the caller's process),
:mod:`controller.trials.loadgen.worker` (the client as its own process, speaking JSON lines) and
:mod:`controller.trials.loadgen.process` (the operator's side of that process). This module re-exports them.
"""

from controller.trials.loadgen.client import LoadGenerator, ProgressCallback, run_plan
from controller.trials.loadgen.plan import MOTIF_TOKENS, LoadPlan, Mode, PlannedRequest, plan_requests, sample_lengths
from controller.trials.loadgen.report import (
    IN_FLIGHT_WINDOW_S,
    LOOP_STALL_SLACK_S,
    LOOP_TICK_S,
    Adherence,
    LoadReport,
    LoadSummary,
    RequestRecord,
    in_flight_profile,
    measure_adherence,
    percentiles,
)

__all__ = [
    "IN_FLIGHT_WINDOW_S",
    "LOOP_STALL_SLACK_S",
    "LOOP_TICK_S",
    "MOTIF_TOKENS",
    "Adherence",
    "LoadGenerator",
    "LoadPlan",
    "LoadReport",
    "LoadSummary",
    "Mode",
    "PlannedRequest",
    "ProgressCallback",
    "RequestRecord",
    "in_flight_profile",
    "measure_adherence",
    "percentiles",
    "plan_requests",
    "run_plan",
    "sample_lengths",
]
