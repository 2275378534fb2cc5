"""vLLM's Prometheus exposition for one simulated replica.

Names, types, labels and bucket boundaries follow vLLM's ``PrometheusStatLogger`` (``vllm/v1/metrics/loggers.py``,
``vllm/v1/metrics/buckets.py``, ``vllm/v1/spec_decode/metrics.py``) so that dashboards, PromQL and ``vllm bench serve``
work unchanged against the simulator. Every series carries ``model_name`` and ``engine``; counters are scraped with
the ``_total`` suffix. The speculative-decoding families exist only when the config speculates, as in vLLM.

Each replica has its own :class:`prometheus_client.CollectorRegistry`, so many replicas can live in one process.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from controller.domain.config import EngineConfig
from controller.simulator.engine import ReplicaEngine, StepResult

#: Bucket boundaries, verbatim from ``vllm/v1/metrics/buckets.py``.
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
TIME_TO_FIRST_TOKEN_BUCKETS: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
INTER_TOKEN_LATENCY_BUCKETS: tuple[float, ...] = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
REQUEST_NUM_PREEMPTIONS_BUCKETS: tuple[float, ...] = (1, 2, 3, 4, 5, 10, 20)

#: ``vllm:request_success`` finish reasons (vLLM pre-creates one series per reason).
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")

#: Handlers prometheus-fastapi-instrumentator leaves out of ``http_requests_total`` in vLLM.
EXCLUDED_HANDLERS: frozenset[str] = frozenset({"/metrics", "/health", "/load", "/ping", "/version", "/server_info"})


def build_1_2_5_buckets(max_value: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... capped at ``max_value`` (vLLM's ``request_tokens`` bucket family)."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


def cache_config_labels(config: EngineConfig, *, block_size: int, num_gpu_blocks: int) -> dict[str, str]:
    """Labels of ``vllm:cache_config_info``: vLLM's CacheConfig names plus every tuned knob of the config."""
    labels = {
        "block_size": str(block_size),
        "cache_dtype": config.kv_cache_dtype,
        "num_gpu_blocks": str(num_gpu_blocks),
        "enable_prefix_caching": str(config.enable_prefix_caching is not False),
    }
    for name, value in config.model_dump(mode="json").items():
        labels.setdefault(name, str(value))
    return labels


class ReplicaMetrics:
    """The ``/metrics`` families of one replica, fed by engine steps (use :meth:`on_step` as an engine observer)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(
        self,
        *,
        model_name: str,
        config: EngineConfig,
        max_model_len: int,
        engine_index: int = 0,
        block_size: int = 16,
        num_gpu_blocks: int = 0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.model_name = model_name
        self.config = config
        labelnames = ["model_name", "engine"]
        lv = (model_name, str(engine_index))
        reg = self.registry

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labelnames, registry=reg)

        def histogram(name: str, doc: str, buckets: tuple[float, ...] | list[float]) -> Histogram:
            return Histogram(name, doc, labelnames, buckets=buckets, registry=reg)

        self.num_requests_running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labelnames, registry=reg
        ).labels(*lv)
        self.num_requests_waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labelnames, registry=reg
        ).labels(*lv)
        self.kv_cache_usage_perc = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labelnames, registry=reg
        ).labels(*lv)
        info = cache_config_labels(config, block_size=block_size, num_gpu_blocks=num_gpu_blocks)
        info["engine"] = str(engine_index)
        Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", list(info), registry=reg).labels(
            **info
        ).set(1)

        self.prefix_cache_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        ).labels(*lv)
        self.prefix_cache_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        ).labels(*lv)
        self.num_preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        ).labels(*lv)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(*lv)
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.").labels(*lv)
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labelnames, "finished_reason"],
            registry=reg,
        )
        self.request_success = {reason: success.labels(*lv, reason) for reason in FINISH_REASONS}

        tokens_buckets = build_1_2_5_buckets(max_model_len)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens_buckets
        ).labels(*lv)
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens_buckets
        ).labels(*lv)
        self.request_params_max_tokens = histogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens_buckets
        ).labels(*lv)
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_TOKENS_BUCKETS
        ).labels(*lv)
        self.time_to_first_token = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TIME_TO_FIRST_TOKEN_BUCKETS,
        ).labels(*lv)
        self.inter_token_latency = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            INTER_TOKEN_LATENCY_BUCKETS,
        ).labels(*lv)
        self.request_time_per_output_token = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            INTER_TOKEN_LATENCY_BUCKETS,
        ).labels(*lv)
        self.e2e_request_latency = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS
        ).labels(*lv)
        self.request_queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(*lv)
        self.request_inference_time = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(*lv)
        self.request_prefill_time = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(*lv)
        self.request_decode_time = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(*lv)
        self.request_num_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            REQUEST_NUM_PREEMPTIONS_BUCKETS,
        ).labels(*lv)

        self.speculative = config.num_speculative_tokens > 0
        self.spec_accepted_per_pos: list[Counter] = []
        if self.speculative:
            self.spec_num_drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.").labels(*lv)
            self.spec_num_draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.").labels(
                *lv
            )
            self.spec_num_accepted_tokens = counter(
                "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."
            ).labels(*lv)
            per_pos = Counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                [*labelnames, "position"],
                registry=reg,
            )
            self.spec_accepted_per_pos = [per_pos.labels(*lv, str(pos)) for pos in range(config.num_speculative_tokens)]

        self._http = Counter(
            "http_requests",
            "Total number of requests by method, status and handler.",
            ["handler", "method", "status"],
            registry=reg,
        )

    # ----- feeding ---------------------------------------------------------------------------------------------
    def on_step(self, engine: ReplicaEngine, result: StepResult) -> None:
        """Record one engine step (signature of an engine observer)."""
        self.num_requests_running.set(result.num_running)
        self.num_requests_waiting.set(result.num_waiting)
        self.kv_cache_usage_perc.set(result.kv_usage)
        if result.preemptions:
            self.num_preemptions.inc(result.preemptions)
        if result.prefix_queries:
            self.prefix_cache_queries.inc(result.prefix_queries)
        if result.prefix_hits:
            self.prefix_cache_hits.inc(result.prefix_hits)
        generated = result.generated_tokens
        if result.prompt_tokens_done:
            self.prompt_tokens.inc(result.prompt_tokens_done)
        if generated:
            self.generation_tokens.inc(generated)
        self.iteration_tokens.observe(result.prefill_tokens + generated)
        for gap in result.itl.tolist():
            self.inter_token_latency.observe(gap)
        for rid in result.first_token_ids.tolist():
            record = engine.record(rid)
            self.time_to_first_token.observe(record.ttft)
        if self.speculative and result.num_drafts:
            self.spec_num_drafts.inc(result.num_drafts)
            self.spec_num_draft_tokens.inc(result.num_draft_tokens)
            self.spec_num_accepted_tokens.inc(result.num_accepted)
            for pos, accepted in enumerate(result.accepted_per_pos.tolist()):
                if accepted:
                    self.spec_accepted_per_pos[pos].inc(accepted)
        for rid in result.finished_ids.tolist():
            record = engine.record(rid)
            self.request_success[record.finish_reason].inc()
            if record.output_tokens == 0:  # rejected before running: no latencies to record
                continue
            self.e2e_request_latency.observe(record.e2e)
            self.request_queue_time.observe(record.queue_time)
            self.request_prefill_time.observe(record.prefill_time)
            self.request_inference_time.observe(record.inference_time)
            self.request_decode_time.observe(record.decode_time)
            self.request_num_preemptions.observe(record.preemptions)
            self.request_prompt_tokens.observe(record.prompt_tokens)
            self.request_generation_tokens.observe(record.output_tokens)
            self.request_params_max_tokens.observe(record.max_tokens)
            self.request_time_per_output_token.observe(record.tpot)

    def sync_gauges(self, engine: ReplicaEngine) -> None:
        """Set the gauges from the engine's current state (at scrape time, so an idle replica reads true)."""
        self.num_requests_running.set(engine.num_running)
        self.num_requests_waiting.set(engine.num_waiting)
        self.kv_cache_usage_perc.set(engine.kv_usage)

    def observe_http(self, *, handler: str, method: str, status: int) -> None:
        """Count one finished HTTP request the way prometheus-fastapi-instrumentator does (grouped status)."""
        if handler in EXCLUDED_HANDLERS:
            return
        self._http.labels(handler, method, f"{status // 100}xx").inc()

    def render(self) -> bytes:
        """The text exposition format, as served on ``/metrics``."""
        return generate_latest(self.registry)
