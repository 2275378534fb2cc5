"""The load plan: every request a run sends, decided up front from a :class:`TrafficShape` and a seed.

- **Prompts are token ids.** vLLM's ``/v1/completions`` accepts ``prompt`` as a list of token ids, so a prompt of
  exactly N tokens needs no tokenizer in the operator: ids are drawn uniformly from ``token_id_range`` (which must
  lie inside the model's vocabulary and away from special tokens).
- **Lengths** are log-normal with the shape's mean and cv (``LengthDistribution.lognormal_params()``), rounded,
  capped by the distribution's ``maximum`` and by ``max_model_len``.
- **Repetitive share** and **prefix share**: see :func:`plan_requests`.
- **Arrivals**: open loop sends at Poisson (``burstiness == 1``) or gamma gaps with mean ``1 / rate``; closed loop
  keeps ``concurrency`` requests in flight.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import numpy as np

from controller.domain.traffic import LengthDistribution, TrafficShape

Mode = Literal["open", "closed"]

#: Length of the repeated motif in repetitive prompts.
MOTIF_TOKENS = 8


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    send_at_s: float  # offset from the start of the run (open loop); 0 for closed loop
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    repetitive: bool = False
    #: Sent instead of the ids when set: a text that the engine's tokenizer makes ``prompt_token_ids`` of (a
    #: caller that has the tokenizer, comparing with a client that sends text; the engine then tokenizes it).
    prompt_text: str | None = None

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


@dataclass(frozen=True)
class LoadPlan:
    """Everything a run sends, decided up front from the shape and the seed."""

    mode: Mode
    concurrency: int  # closed loop: streams kept in flight; open loop: cap on in-flight (0 = none)
    requests: tuple[PlannedRequest, ...]
    seed: int

    @property
    def requested_output_tokens(self) -> int:
        return sum(r.max_tokens for r in self.requests)

    def fingerprint(self) -> str:
        """Stable identity of the request sequence (same seed and shape give the same fingerprint)."""
        h = hashlib.sha256(f"{self.mode}|{self.concurrency}".encode())
        for r in self.requests:
            h.update(f"{r.send_at_s:.9f}|{r.max_tokens}|{r.repetitive}|".encode())
            h.update(np.asarray(r.prompt_token_ids, dtype=np.int64).tobytes())
            if r.prompt_text is not None:
                h.update(b"|text|" + r.prompt_text.encode())
        return h.hexdigest()[:16]


def sample_lengths(dist: LengthDistribution, n: int, rng: np.random.Generator, *, cap: int | None = None) -> list[int]:
    """``n`` integer lengths from the distribution (>= 1), capped by its maximum and ``cap``."""
    if dist.cv == 0:
        values = np.full(n, dist.mean)
    else:
        mu, sigma = dist.lognormal_params()
        values = rng.lognormal(mu, sigma, n)
    upper = min(x for x in (dist.maximum, cap) if x is not None) if (dist.maximum or cap) else None
    out = np.maximum(np.rint(values), 1).astype(np.int64)
    if upper is not None:
        out = np.minimum(out, upper)
    return [int(v) for v in out]


def plan_requests(
    shape: TrafficShape,
    *,
    num_requests: int,
    seed: int = 0,
    mode: Mode | None = None,
    burstiness: float = 1.0,
    token_id_range: tuple[int, int] = (300, 4000),
    max_model_len: int | None = None,
    max_concurrency: int | None = None,
) -> LoadPlan:
    """Plan ``num_requests`` requests that replay ``shape``. ``mode`` defaults to open loop when the shape has an
    arrival rate, closed loop otherwise."""
    if num_requests < 1:
        raise ValueError("num_requests must be >= 1")
    if burstiness <= 0:
        raise ValueError("burstiness must be > 0")
    low, high = token_id_range
    if not 0 <= low < high:
        raise ValueError(f"token_id_range must be 0 <= low < high, got {token_id_range}")
    chosen: Mode = mode or ("open" if shape.arrival_rate_rps > 0 else "closed")
    if chosen == "open" and shape.arrival_rate_rps <= 0:
        raise ValueError("open-loop replay needs a shape with arrival_rate_rps > 0")
    concurrency = shape.closed_loop_streams() if chosen == "closed" else (max_concurrency or 0)
    if chosen == "closed" and max_concurrency:
        concurrency = min(concurrency, max_concurrency)

    rng = np.random.default_rng(seed)
    out_cap = max_model_len - 1 if max_model_len else None
    outputs = sample_lengths(shape.output_tokens, num_requests, rng, cap=out_cap)
    prompts = sample_lengths(shape.prompt_tokens, num_requests, rng, cap=out_cap)
    if max_model_len:
        prompts = [max(1, min(p, max_model_len - o)) for p, o in zip(prompts, outputs, strict=True)]
    repetitive = rng.random(num_requests) < shape.repetitiveness
    longest = max(prompts)
    shared_prefix = rng.integers(low, high, longest)
    if chosen == "open":
        rate = shape.arrival_rate_rps
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), num_requests)
        gaps[0] = 0.0
        send_at = np.cumsum(gaps)
    else:
        send_at = np.zeros(num_requests)

    planned: list[PlannedRequest] = []
    for i in range(num_requests):
        n = prompts[i]
        n_prefix = min(n, round(shape.prefix_share * n))
        body_len = n - n_prefix
        if repetitive[i]:
            motif = rng.integers(low, high, MOTIF_TOKENS)
            body = np.resize(motif, body_len)
        else:
            body = rng.integers(low, high, body_len)
        ids = np.concatenate([shared_prefix[:n_prefix], body]).astype(np.int64)
        planned.append(
            PlannedRequest(
                index=i,
                send_at_s=float(send_at[i]),
                prompt_token_ids=tuple(int(x) for x in ids),
                max_tokens=outputs[i],
                repetitive=bool(repetitive[i]),
            )
        )
    return LoadPlan(mode=chosen, concurrency=concurrency, requests=tuple(planned), seed=seed)
