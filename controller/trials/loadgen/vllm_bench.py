"""Measure an endpoint with ``vllm bench serve`` (from the engine venv) and turn its result JSON into a TrialResult.

An alternative to :mod:`controller.trials.loadgen.replay` where the vLLM image is at hand (e.g. inside the canary pod):
the same shape becomes ``vllm bench serve`` flags, and the result file becomes the same :class:`TrialResult`.

- ``dataset="random"``: ``--random-input-len``/``--random-output-len`` at the shape's means; ``cv`` becomes
  ``--random-range-ratio`` (a uniform ``[L(1-r), L(1+r)]`` has ``cv = r / sqrt(3)``); ``prefix_share`` becomes
  ``--random-prefix-len``.
- ``dataset="sharegpt"``: the seeded plan of :mod:`controller.trials.loadgen.replay` written as a ShareGPT file (prompt
  and answer strings of exactly the planned token counts when the words are single tokens), ``--disable-shuffle``,
  so both tools send requests of the same lengths in the same order. The default prompt is one repeated word, so
  every prompt shares its prefix with the longer ones and an engine with prefix caching serves most of the
  prefill from cache; for the same tokens as the load generator, pass texts that tokenize to the plan's ids
  (``write_sharegpt_dataset(..., prompt_texts=...)``, as ``bench/loadgen.py`` does).
- ``dataset="custom"``: the same plan as ``{"prompt", "output_tokens"}`` JSONL (needs pandas in the engine venv).

Arrivals: ``--request-rate`` with ``--burstiness`` (open loop) or ``--request-rate inf --max-concurrency C``
(closed loop), ``--ignore-eos`` always.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller.domain.config import EngineConfig
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import Percentiles, SpecDecodeStats, TrialResult, TrialStatus
from controller.errors import InvalidInput, TemporaryError
from controller.trials.engine.launchers import default_engine_python
from controller.trials.loadgen.replay import LoadPlan, plan_requests

BENCH_LAUNCHER = Path(__file__).resolve().parents[1] / "engine" / "bench_launcher.py"


class BenchFailed(TemporaryError):
    """``vllm bench serve`` did not produce a result (says nothing about the config under test)."""


class BenchResult(BaseModel):
    """The fields of ``vllm bench serve --save-result`` that a TrialResult needs (others ignored).

    NaN and infinite numbers are refused (the error names the field); the TTFT and TPOT percentiles are optional
    here, and a result without them is a failed measurement, never a zero latency."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    duration: float = Field(ge=0)
    completed: int = Field(ge=0)
    failed: int = Field(default=0, ge=0)
    total_input_tokens: int = Field(ge=0)
    total_output_tokens: int = Field(ge=0)
    request_throughput: float = Field(ge=0)
    output_throughput: float = Field(ge=0)
    total_token_throughput: float = Field(ge=0)
    request_goodput: float | None = None
    max_concurrent_requests: int | None = None
    median_ttft_ms: float | None = Field(default=None, ge=0)
    p95_ttft_ms: float | None = Field(default=None, ge=0)
    p99_ttft_ms: float | None = Field(default=None, ge=0)
    median_tpot_ms: float | None = Field(default=None, ge=0)
    p95_tpot_ms: float | None = Field(default=None, ge=0)
    p99_tpot_ms: float | None = Field(default=None, ge=0)
    median_itl_ms: float = 0.0
    p95_itl_ms: float | None = None
    p99_itl_ms: float = 0.0
    median_e2el_ms: float | None = None
    p95_e2el_ms: float | None = None
    p99_e2el_ms: float | None = None
    spec_decode_acceptance_rate: float | None = None  # percent
    spec_decode_acceptance_length: float | None = None
    spec_decode_num_drafts: float | None = None
    spec_decode_per_position_acceptance_rates: list[float] | None = None

    def percentiles(self, metric: str) -> Percentiles | None:
        p50 = getattr(self, f"median_{metric}_ms", None)
        p99 = getattr(self, f"p99_{metric}_ms", None)
        if p50 is None or p99 is None:
            return None
        p95 = getattr(self, f"p95_{metric}_ms", None)
        p95 = p95 if p95 is not None else p50 + (p99 - p50) * 0.9
        return Percentiles(p50=p50 / 1000, p95=max(p95, p50) / 1000, p99=max(p99, p95, p50) / 1000)


def load_result(path: Path) -> BenchResult:
    try:
        return BenchResult.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise InvalidInput(f"not a vllm bench result: {exc}", source=str(path)) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"not a vllm bench result: {field}: {first['msg']}", source=str(path), field=field) from exc


def to_trial_result(
    bench: BenchResult, *, config: EngineConfig, shape: TrafficShape, slo: SLO, source: str = "vllm-bench"
) -> TrialResult:
    if bench.completed == 0:
        return TrialResult(
            config=config, shape=shape, slo=slo, status=TrialStatus.FAILED, reason="vllm bench: no request completed",
            source=source, failed=bench.failed,
        )  # fmt: skip
    ttft, tpot = bench.percentiles("ttft"), bench.percentiles("tpot")
    if ttft is None or tpot is None:
        absent = "median_ttft_ms/p99_ttft_ms" if ttft is None else "median_tpot_ms/p99_tpot_ms"
        return TrialResult(
            config=config, shape=shape, slo=slo, status=TrialStatus.FAILED, source=source, failed=bench.failed,
            reason=f"vllm bench: the result has no {absent}: latency not measured",
        )  # fmt: skip
    goodput_rps = bench.request_goodput if bench.request_goodput is not None else bench.request_throughput
    mean_out = bench.total_output_tokens / bench.completed
    spec = None
    if bench.spec_decode_acceptance_rate is not None and bench.spec_decode_acceptance_length is not None:
        spec = SpecDecodeStats(
            acceptance_rate=min(1.0, bench.spec_decode_acceptance_rate / 100),
            mean_acceptance_length=max(1.0, bench.spec_decode_acceptance_length),
            per_position=tuple(bench.spec_decode_per_position_acceptance_rates or ()),
        )
    return TrialResult(
        config=config,
        shape=shape,
        slo=slo,
        status=TrialStatus.MEASURED,
        source=source,
        duration_s=bench.duration,
        completed=bench.completed,
        failed=bench.failed,
        output_tokens_per_s=bench.output_throughput,
        total_tokens_per_s=bench.total_token_throughput,
        request_throughput=bench.request_throughput,
        goodput_rps=goodput_rps,
        goodput_tokens_per_s=goodput_rps * mean_out,
        ttft_s=ttft,
        tpot_s=tpot,
        itl_s=bench.percentiles("itl"),
        e2e_s=bench.percentiles("e2el"),
        spec_decode=spec,
    )


@dataclass(frozen=True)
class BenchRun:
    result: BenchResult
    command: list[str]
    raw: dict[str, Any]  # the whole result JSON (per-request arrays included with --save-detailed)
    output_tail: str


def range_ratio(cv: float) -> float:
    return min(0.95, cv * math.sqrt(3))


#: A prompt word that is exactly one token to the simulator (4 bytes) and to the tiny test tokenizer.
PROMPT_WORD = " the"
#: An output placeholder that is exactly one token to any tokenizer that has it as a special token.
OUTPUT_TOKEN = "<|pad|>"


def sharegpt_valid(prompt_tokens: int, output_tokens: int) -> bool:
    """vllm bench's ShareGPT filter: 4 <= prompt <= 1024, output >= 4, total <= 2048."""
    return 4 <= prompt_tokens <= 1024 and output_tokens >= 4 and prompt_tokens + output_tokens <= 2048


def write_sharegpt_dataset(
    plan: LoadPlan,
    path: Path,
    *,
    prompt_word: str = PROMPT_WORD,
    output_token: str = OUTPUT_TOKEN,
    prompt_texts: Sequence[str] | None = None,
) -> int:
    """The plan as a ShareGPT JSON file, in plan order (run with ``--disable-shuffle``): each prompt is
    ``prompt_tokens`` copies of ``prompt_word`` (or, with ``prompt_texts``, that request's text: one per planned
    request, for a caller that made the texts tokenize to the plan's own token ids) and each answer ``max_tokens``
    copies of ``output_token``, so the bench asks for exactly the planned lengths when those strings are one token
    each (true for the simulator and the tiny test model). Requests outside the ShareGPT filter are skipped; returns
    how many were written."""
    if prompt_texts is not None and len(prompt_texts) != len(plan.requests):
        raise ValueError(f"prompt_texts has {len(prompt_texts)} texts for {len(plan.requests)} planned requests")
    rows = [
        {
            "id": str(r.index),
            "conversations": [
                {"from": "human", "value": prompt_word * r.prompt_tokens if prompt_texts is None else prompt_texts[i]},
                {"from": "gpt", "value": output_token * r.max_tokens},
            ],
        }
        for i, r in enumerate(plan.requests)
        if sharegpt_valid(r.prompt_tokens, r.max_tokens)
    ]
    path.write_text(json.dumps(rows), encoding="utf-8")
    return len(rows)


def write_custom_dataset(plan: LoadPlan, path: Path, *, prompt_word: str = PROMPT_WORD) -> Path:
    """The plan as a ``custom`` JSONL dataset (``--custom-output-len -1``). vLLM reads it with pandas, which the
    CPU engine venv does not ship: prefer :func:`write_sharegpt_dataset` there."""
    with path.open("w", encoding="utf-8") as fh:
        for r in plan.requests:
            fh.write(json.dumps({"prompt": prompt_word * r.prompt_tokens, "output_tokens": r.max_tokens}) + "\n")
    return path


def bench_command(
    base_url: str,
    model: str,
    tokenizer: str,
    shape: TrafficShape,
    *,
    num_prompts: int,
    seed: int = 0,
    mode: Literal["open", "closed"] | None = None,
    burstiness: float = 1.0,
    dataset: Literal["random", "sharegpt", "custom"] = "random",
    dataset_path: Path | None = None,
    slo: SLO | None = None,
    result_dir: Path,
    result_filename: str = "result.json",
    engine_python: str | None = None,
    temperature: float = 0.0,
) -> list[str]:
    chosen = mode or ("open" if shape.arrival_rate_rps > 0 else "closed")
    cmd = [engine_python or default_engine_python(), str(BENCH_LAUNCHER), "bench", "serve"]
    cmd += ["--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions"]
    cmd += ["--model", model, "--tokenizer", tokenizer, "--num-prompts", str(num_prompts), "--seed", str(seed)]
    if dataset == "random":
        cmd += ["--dataset-name", "random"]
        cmd += ["--random-input-len", str(max(1, round(shape.prompt_tokens.mean)))]
        cmd += ["--random-output-len", str(max(1, round(shape.output_tokens.mean)))]
        ratio = {"input": range_ratio(shape.prompt_tokens.cv), "output": range_ratio(shape.output_tokens.cv)}
        cmd += ["--random-range-ratio", json.dumps(ratio)]
        prefix = round(shape.prefix_share * shape.prompt_tokens.mean)
        if prefix:
            cmd += ["--random-prefix-len", str(prefix)]
    elif dataset_path is None:
        raise ValueError(f"dataset '{dataset}' needs dataset_path")
    elif dataset == "sharegpt":
        cmd += ["--dataset-name", "sharegpt", "--dataset-path", str(dataset_path), "--disable-shuffle"]
    else:
        cmd += ["--dataset-name", "custom", "--dataset-path", str(dataset_path), "--custom-output-len", "-1"]
        cmd += ["--skip-chat-template", "--disable-shuffle"]
    if chosen == "open":
        cmd += ["--request-rate", f"{shape.arrival_rate_rps:g}", "--burstiness", f"{burstiness:g}"]
    else:
        cmd += ["--request-rate", "inf", "--max-concurrency", str(shape.closed_loop_streams())]
    cmd += ["--ignore-eos", "--temperature", f"{temperature:g}", "--disable-tqdm"]
    cmd += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99"]
    if slo is not None:
        cmd += ["--goodput", f"ttft:{slo.ttft_seconds * 1000:g}", f"tpot:{slo.tpot_seconds * 1000:g}"]
    cmd += ["--save-result", "--result-dir", str(result_dir), "--result-filename", result_filename]
    return cmd


def run_bench(
    base_url: str,
    model: str,
    tokenizer: str,
    shape: TrafficShape,
    *,
    num_prompts: int,
    seed: int = 0,
    mode: Literal["open", "closed"] | None = None,
    dataset: Literal["random", "sharegpt", "custom"] = "random",
    slo: SLO | None = None,
    timeout_s: float = 900.0,
    engine_python: str | None = None,
    env: dict[str, str] | None = None,
) -> BenchRun:
    """Run ``vllm bench serve`` against ``base_url`` and return its parsed result."""

    with tempfile.TemporaryDirectory(prefix="vllm-bench-") as tmp:
        out = Path(tmp)
        ds: Path | None = None
        if dataset != "random":
            plan = plan_requests(shape, num_requests=num_prompts, seed=seed, mode=mode)
            if dataset == "sharegpt":
                ds = out / "dataset.json"
                num_prompts = write_sharegpt_dataset(plan, ds)
            else:
                ds = write_custom_dataset(plan, out / "dataset.jsonl")
        cmd = bench_command(
            base_url, model, tokenizer, shape, num_prompts=num_prompts, seed=seed, mode=mode, dataset=dataset,
            dataset_path=ds, slo=slo, result_dir=out, engine_python=engine_python,
        )  # fmt: skip
        proc_env = dict(os.environ)
        proc_env.pop("PYTHONPATH", None)
        proc_env.update({"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "TOKENIZERS_PARALLELISM": "false"})
        proc_env.update(env or {})
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout_s, env=proc_env, cwd=tmp, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise BenchFailed(f"vllm bench serve timed out after {timeout_s:.0f} s") from exc
        path = out / "result.json"
        tail = (proc.stdout + proc.stderr)[-3000:]
        if proc.returncode != 0 or not path.exists():
            raise BenchFailed(f"vllm bench serve failed ({proc.returncode}): {tail}")
        result = load_result(path)
        raw = json.loads(path.read_text(encoding="utf-8"))
    return BenchRun(result=result, command=cmd, raw=raw, output_tail=tail)
