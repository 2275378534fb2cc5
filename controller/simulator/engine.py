"""A step-level replica engine: vLLM-V1-style continuous batching over a performance model.

One :class:`ReplicaEngine` is one simulated vLLM replica. Each *step* it builds a batch the way vLLM's V1 scheduler
does, asks the performance model how long that batch takes, and applies the outcome:

* running requests are scheduled first, in admission order: a decoding request needs ``1 + k`` tokens (its last
  sampled token plus ``k`` speculative drafts), a prefilling one the rest of its prompt, chunked to what is left of
  ``max_num_batched_tokens``;
* every scheduled token needs a KV slot (blocks of ``block_size`` tokens). When the KV cache runs out, the newest
  running requests are preempted (their KV is dropped and they go back to the front of the waiting queue, to be
  recomputed later), exactly the V1 "preempt the last running request" rule;
* waiting requests are admitted while token budget, ``max_num_seqs`` and KV blocks allow, reusing prefix-cached
  blocks when prefix caching is on;
* at the end of the step each request that finished its prefill samples a token, and each decoding request emits
  ``1 + a`` tokens, where ``a`` accepted drafts are sampled per sequence from the per-position acceptance rates
  (``P(a > i) = acceptance[i]``, as vLLM's ``spec_decode_num_accepted_tokens_per_pos`` reports them).

Time is *virtual*: :meth:`ReplicaEngine.step`, :meth:`ReplicaEngine.run_until` and :meth:`ReplicaEngine.advance` move
the engine's clock by the modelled step durations, so a 60 s trial takes a fraction of a second of CPU. The per-step
work is vectorised with numpy over the running set. :class:`RealTimeDriver` runs the same engine in real time on an
asyncio loop (each step sleeps its duration divided by ``speedup``) for the HTTP server.

With the same seed, the same requests and the same performance model the engine is fully deterministic.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from controller.domain.config import EngineConfig

log = logging.getLogger(__name__)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: vLLM's default KV block size (tokens per block).
DEFAULT_BLOCK_SIZE = 16
#: Context length servers and trials admit unless told otherwise (always capped by what the KV cache holds).
DEFAULT_MAX_MODEL_LEN = 131_072

_PENDING, _WAITING, _RUNNING, _FINISHED = 0, 1, 2, 3
FINISH_REASONS: tuple[str, ...] = ("", "stop", "length", "abort", "error")
_STOP, _LENGTH, _ABORT, _ERROR = 1, 2, 3, 4


# ----- what the engine needs from a performance model ----------------------------------------------------------
class CapacityLike(Protocol):
    @property
    def max_num_seqs(self) -> int: ...
    @property
    def max_num_batched_tokens(self) -> int: ...
    @property
    def kv_cache_tokens(self) -> int: ...
    @property
    def state_tokens_per_seq(self) -> int: ...


class StepTimingLike(Protocol):
    @property
    def seconds(self) -> float: ...


class StepModel(Protocol):
    """The part of :class:`controller.simulator.perf.PerformanceModel` the engine uses."""

    def capacity(self, config: EngineConfig) -> CapacityLike: ...

    def acceptance(self, config: EngineConfig, repetitiveness: float) -> tuple[float, ...]: ...

    def step(
        self,
        config: EngineConfig,
        *,
        decode_seqs: int,
        prefill_tokens: int,
        mean_context_tokens: float,
        repetitiveness: float = 0.0,
        prefill_attention_work: float | None = None,
    ) -> StepTimingLike: ...


# ----- results ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RequestRecord:
    """Everything the engine knows about one request. Times are engine (virtual) seconds; ``nan`` = not yet."""

    request_id: int
    prompt_tokens: int
    max_tokens: int
    arrival: float
    scheduled: float
    first_token: float
    last_token: float
    finished: float
    output_tokens: int
    preemptions: int
    cached_tokens: int
    finish_reason: str
    token_times: tuple[float, ...] = ()

    @property
    def done(self) -> bool:
        return not math.isnan(self.finished)

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def e2e(self) -> float:
        return self.finished - self.arrival

    @property
    def queue_time(self) -> float:
        return self.scheduled - self.arrival

    @property
    def prefill_time(self) -> float:
        return self.first_token - self.scheduled

    @property
    def decode_time(self) -> float:
        return self.last_token - self.first_token

    @property
    def inference_time(self) -> float:
        return self.last_token - self.scheduled

    @property
    def tpot(self) -> float:
        """Per-request time per output token after the first (vLLM's ``request_time_per_output_token``)."""
        return self.decode_time / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0


@dataclass(frozen=True)
class StepResult:
    """What one engine step did. Arrays are aligned per emitting request."""

    start: float
    end: float
    prefill_tokens: int  # prompt (or recompute) tokens computed this step
    decode_seqs: int
    emitted_ids: IntArray  # requests that emitted tokens this step
    emitted_counts: IntArray  # how many tokens each emitted
    itl: FloatArray  # gap since the previous emission, for emitters that had emitted before
    first_token_ids: IntArray  # requests whose first token came out this step
    finished_ids: IntArray  # requests that finished this step
    prompt_tokens_done: int  # prompt tokens of requests that got their first token this step
    preemptions: int
    prefix_queries: int
    prefix_hits: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted: int
    accepted_per_pos: IntArray
    num_running: int
    num_waiting: int
    kv_usage: float

    @property
    def generated_tokens(self) -> int:
        return int(self.emitted_counts.sum())

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class EngineCounters:
    """Cumulative counters since the engine started (what vLLM's Prometheus counters count)."""

    steps: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    finished: int = 0
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)


@dataclass(slots=True)
class _Batch:
    """One step's batch while it is formed: the requests in it, in admission order, with their computed tokens,
    whether each is prefilling and the tokens each gets this step."""

    run: IntArray
    comp: IntArray
    prefilling: BoolArray
    chunk: IntArray
    preempted: int
    may_admit: bool
    budget: int
    """Tokens of the step's budget left for admissions."""
    queries: int = 0
    hits: int = 0


@dataclass(frozen=True, slots=True)
class _Drafts:
    """Speculative decoding in one step: tokens each decoding sequence emits (1 + accepted), and the counts."""

    emitted: IntArray
    drafts: int
    draft_tokens: int
    accepted: int
    per_pos: IntArray


StepObserver = Callable[["ReplicaEngine", StepResult], None]


class _Table:
    """Struct-of-arrays request table that grows by doubling."""

    _INT: tuple[str, ...] = ("prompt", "max_tokens", "stop_at", "computed", "target", "generated", "blocks")
    _INT += ("preempt", "state", "cached", "reason")
    _FLOAT = ("arrival", "scheduled", "first_tok", "last_tok", "finish", "rep")

    def __init__(self, capacity: int = 1024) -> None:
        self.size = 0
        self.prompt = np.zeros(capacity, np.int64)
        self.max_tokens = np.zeros(capacity, np.int64)
        self.stop_at = np.zeros(capacity, np.int64)
        self.computed = np.zeros(capacity, np.int64)
        self.target = np.zeros(capacity, np.int64)
        self.generated = np.zeros(capacity, np.int64)
        self.blocks = np.zeros(capacity, np.int64)
        self.preempt = np.zeros(capacity, np.int64)
        self.state = np.zeros(capacity, np.int64)
        self.cached = np.zeros(capacity, np.int64)
        self.reason = np.zeros(capacity, np.int64)
        self.arrival = np.full(capacity, np.nan)
        self.scheduled = np.full(capacity, np.nan)
        self.first_tok = np.full(capacity, np.nan)
        self.last_tok = np.full(capacity, np.nan)
        self.finish = np.full(capacity, np.nan)
        self.rep = np.zeros(capacity, np.float64)

    def append(self) -> int:
        if self.size == len(self.prompt):
            cap = 2 * len(self.prompt)
            for name in self._INT:
                old = getattr(self, name)
                new = np.zeros(cap, np.int64)
                new[: len(old)] = old
                setattr(self, name, new)
            for name in self._FLOAT:
                old = getattr(self, name)
                new = np.full(cap, np.nan) if name != "rep" else np.zeros(cap, np.float64)
                new[: len(old)] = old
                setattr(self, name, new)
        rid = self.size
        self.size += 1
        return rid


class ReplicaEngine:
    """One simulated vLLM replica serving ``config`` on the hardware ``perf`` models.

    ``record_token_times`` keeps every token's timestamp per request (for streaming and inspection); turn it off for
    long benchmark runs, where the aggregate arrays in :class:`StepResult` and :meth:`finished_arrays` suffice.
    ``num_gpu_blocks_override`` replaces the modelled KV capacity with a fixed number of blocks, like vLLM's
    ``--num-gpu-blocks-override``.
    """

    def __init__(
        self,
        perf: StepModel,
        config: EngineConfig,
        *,
        seed: int = 0,
        max_model_len: int | None = None,
        block_size: int = DEFAULT_BLOCK_SIZE,
        repetitiveness: float = 0.0,
        record_token_times: bool = True,
        start_time: float = 0.0,
        num_gpu_blocks_override: int | None = None,
    ) -> None:
        self.perf = perf
        #: pass each prompt chunk's attention to its cached context (the performance model's prefill fixes)
        self._prefill_work = bool(getattr(perf, "prefill_fixes", False))
        self.config = config
        self.block_size = block_size
        self.repetitiveness = repetitiveness
        self.record_token_times = record_token_times
        cap = perf.capacity(config)
        self.max_num_seqs = int(cap.max_num_seqs)
        self.max_num_batched_tokens = int(cap.max_num_batched_tokens)
        self.kv_cache_tokens = int(cap.kv_cache_tokens)
        if num_gpu_blocks_override is not None:  # vLLM's --num-gpu-blocks-override
            self.kv_cache_tokens = num_gpu_blocks_override * block_size
        self.total_blocks = max(1, self.kv_cache_tokens // block_size)
        self.k = config.num_speculative_tokens
        # Per-sequence state outside the token KV (Mamba SSM/conv state slots), held while a sequence runs.
        self.state_blocks = -(-int(cap.state_tokens_per_seq) // block_size)
        # The longest sequence the KV cache can hold, including the decode look-ahead of 1 + k slots.
        kv_limit = (self.total_blocks - self.state_blocks) * block_size - self.k - 1
        self.max_model_len = max(1, min(max_model_len, kv_limit) if max_model_len is not None else kv_limit)
        self.prefix_caching = config.enable_prefix_caching is not False
        self.now = float(start_time)
        self.counters = EngineCounters(spec_accepted_per_pos=[0] * self.k)
        self._rng = np.random.default_rng(seed)
        self._t = _Table()
        self._running: IntArray = np.zeros(0, np.int64)
        self._waiting: deque[int] = deque()
        self._arrivals: list[tuple[float, int]] = []
        self._used_blocks = 0
        self._prefix_hashes: list[tuple[int, ...]] = []
        self._prefix_cache: OrderedDict[int, None] = OrderedDict()
        self._token_times: list[list[float]] = []
        self._acceptance: dict[float, FloatArray] = {}
        self._observers: list[StepObserver] = []

    # ----- requests ----------------------------------------------------------------------------------------------
    def add_request(
        self,
        prompt_tokens: int,
        max_tokens: int,
        *,
        arrival: float | None = None,
        eos_after: int | None = None,
        repetitiveness: float | None = None,
        prefix_hashes: Sequence[int] = (),
    ) -> int:
        """Queue a request; returns its id. ``arrival`` defaults to now and may lie in the future.

        ``eos_after`` makes the model emit its end-of-sequence token after that many tokens (finish reason ``stop``);
        by default every request generates ``max_tokens`` (as with ``ignore_eos``). ``prefix_hashes`` are the hashes
        of the prompt's full KV blocks, in order, for prefix caching.
        """
        if prompt_tokens < 1:
            raise ValueError("a request needs at least one prompt token")
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if prompt_tokens + max_tokens > self.max_model_len:
            raise ValueError(
                f"prompt ({prompt_tokens}) + max_tokens ({max_tokens}) exceeds max_model_len ({self.max_model_len})"
            )
        t = self._t
        rid = t.append()
        t.prompt[rid] = prompt_tokens
        t.max_tokens[rid] = max_tokens
        t.stop_at[rid] = min(max_tokens, eos_after) if eos_after is not None and eos_after >= 1 else max_tokens
        t.target[rid] = prompt_tokens
        t.arrival[rid] = self.now if arrival is None else float(arrival)
        t.rep[rid] = self.repetitiveness if repetitiveness is None else repetitiveness
        self._prefix_hashes.append(tuple(prefix_hashes))
        self._token_times.append([])
        if t.arrival[rid] <= self.now:
            t.state[rid] = _WAITING
            self._waiting.append(rid)
        else:
            t.state[rid] = _PENDING
            heapq.heappush(self._arrivals, (float(t.arrival[rid]), rid))
        return rid

    def abort(self, rid: int) -> None:
        """Drop a request (client went away); its KV is freed. Not counted as finished."""
        t = self._t
        state = int(t.state[rid])
        if state == _FINISHED:
            return
        if state == _RUNNING:
            self._running = self._running[self._running != rid]
            self._used_blocks -= int(t.blocks[rid])
            t.blocks[rid] = 0
        elif state == _WAITING:
            self._waiting.remove(rid)
        else:
            self._arrivals = [(a, r) for a, r in self._arrivals if r != rid]
            heapq.heapify(self._arrivals)
        t.state[rid] = _FINISHED
        t.reason[rid] = _ABORT
        self._prefix_hashes[rid] = ()
        t.finish[rid] = self.now

    def add_observer(self, observer: StepObserver) -> None:
        """Call ``observer(engine, result)`` after every step (metrics exporters, streaming)."""
        self._observers.append(observer)

    # ----- state -------------------------------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_requests(self) -> int:
        return self._t.size

    @property
    def kv_usage(self) -> float:
        return self._used_blocks / self.total_blocks

    @property
    def has_work(self) -> bool:
        return bool(len(self._running) or self._waiting)

    def next_arrival(self) -> float | None:
        return self._arrivals[0][0] if self._arrivals else None

    def record(self, rid: int) -> RequestRecord:
        t = self._t
        if not 0 <= rid < t.size:
            raise KeyError(rid)
        return RequestRecord(
            request_id=rid,
            prompt_tokens=int(t.prompt[rid]),
            max_tokens=int(t.max_tokens[rid]),
            arrival=float(t.arrival[rid]),
            scheduled=float(t.scheduled[rid]),
            first_token=float(t.first_tok[rid]),
            last_token=float(t.last_tok[rid]),
            finished=float(t.finish[rid]),
            output_tokens=int(t.generated[rid]),
            preemptions=int(t.preempt[rid]),
            cached_tokens=int(t.cached[rid]),
            finish_reason=FINISH_REASONS[int(t.reason[rid])],
            token_times=tuple(self._token_times[rid]),
        )

    def finished_arrays(self) -> dict[str, npt.NDArray[np.float64] | IntArray]:
        """Columns of every request that finished normally (``stop`` or ``length``), for vectorised analysis."""
        t = self._t
        n = t.size
        done = np.flatnonzero((t.state[:n] == _FINISHED) & ((t.reason[:n] == _STOP) | (t.reason[:n] == _LENGTH)))
        return {
            "id": done,
            "prompt": t.prompt[done],
            "output": t.generated[done],
            "arrival": t.arrival[done],
            "scheduled": t.scheduled[done],
            "first_token": t.first_tok[done],
            "last_token": t.last_tok[done],
            "finish": t.finish[done],
            "preemptions": t.preempt[done],
        }

    def waiting_since(self, now: float) -> npt.NDArray[np.float64]:
        """Arrival times of the requests still without a first token at ``now`` (queued or in prefill)."""
        t = self._t
        n = t.size
        open_ = (t.state[:n] != _FINISHED) & (np.isnan(t.first_tok[:n]) | (t.first_tok[:n] > now))
        arrivals: npt.NDArray[np.float64] = t.arrival[:n][open_ & (t.arrival[:n] <= now)]
        return arrivals

    # ----- time --------------------------------------------------------------------------------------------------
    def run_until(self, until: float) -> int:
        """Run every step that starts before ``until``; returns the number of steps.

        A step is atomic, so the clock may end up to one step past ``until``; when idle the clock moves to
        ``until`` (or to the next arrival, whichever comes first, and continues).
        """
        steps = 0
        while True:
            self._admit_arrivals()
            if self.has_work:
                if self.now >= until:
                    return steps
                self.step()
                steps += 1
                continue
            nxt = self.next_arrival()
            if nxt is not None and nxt < until:
                self.now = max(self.now, nxt)
                continue
            self.now = max(self.now, until)
            return steps

    def advance(self, seconds: float) -> int:
        """Run for ``seconds`` of engine time (see :meth:`run_until`)."""
        return self.run_until(self.now + seconds)

    def idle_until(self, when: float) -> None:
        """Move the clock forward without work (the real-time driver catching up with the wall clock)."""
        self.now = max(self.now, when)

    def _admit_arrivals(self) -> None:
        while self._arrivals and self._arrivals[0][0] <= self.now:
            _, rid = heapq.heappop(self._arrivals)
            self._t.state[rid] = _WAITING
            self._waiting.append(rid)

    def _acceptance_probs(self, rep: float) -> FloatArray:
        probs = self._acceptance.get(rep)
        if probs is None:
            raw = np.clip(np.asarray(self.perf.acceptance(self.config, rep), np.float64)[: self.k], 0.0, 1.0)
            if len(raw) < self.k:
                raw = np.concatenate([raw, np.zeros(self.k - len(raw))])
            probs = np.minimum.accumulate(raw)  # P(a > i) cannot grow with i
            self._acceptance[rep] = probs
        return probs

    def _prefix_lookup(self, rid: int) -> int:
        """Tokens of ``rid``'s prompt already in the prefix cache (whole blocks, leaving one token to compute)."""
        hits = 0
        for h in self._prefix_hashes[rid]:
            if h not in self._prefix_cache:
                break
            self._prefix_cache.move_to_end(h)
            hits += 1
        return min(hits * self.block_size, int(self._t.target[rid]) - 1)

    def _prefix_insert(self, rid: int) -> None:
        cache = self._prefix_cache
        for h in self._prefix_hashes[rid]:
            cache[h] = None
            cache.move_to_end(h)
        while len(cache) > self.total_blocks:
            cache.popitem(last=False)

    # ----- the step ----------------------------------------------------------------------------------------------
    def step(self) -> StepResult | None:
        """Run one engine step starting now; ``None`` when there is nothing to do."""
        self._admit_arrivals()
        if not self.has_work:
            return None
        t = self._t
        t0 = self.now
        batch = self._schedule_running()
        if batch.may_admit:
            self._admit_waiting(batch, t0)
        run, comp, chunk = batch.run, batch.comp, batch.chunk
        self._running = run

        # 4. how long the batch takes
        active = chunk > 0
        decoding = active & ~batch.prefilling
        pre = active & batch.prefilling
        n_decode = int(np.count_nonzero(decoding))
        prefill_tokens = int(chunk[pre].sum())
        if not np.any(active):
            return self._reject_head(t0)
        reps = t.rep[run[decoding]]
        t1 = t0 + self._batch_seconds(comp, chunk, decoding, pre, reps, n_decode, prefill_tokens)

        # 5. apply: prefill progress and first tokens, then decode: 1 + accepted tokens per sequence
        pre_ids = run[pre]
        t.computed[pre_ids] += chunk[pre]
        done_pre = pre_ids[t.computed[pre_ids] >= t.target[pre_ids]]
        first_ids = done_pre[t.generated[done_pre] == 0]
        prompt_done = int(t.prompt[first_ids].sum())
        if self.prefix_caching:
            for rid in first_ids.tolist():
                self._prefix_insert(rid)
        drafts = self._speculate(chunk[decoding], reps, n_decode)
        emit_ids, counts, itl = self._emit(done_pre, run[decoding], drafts.emitted, first_ids, t1)

        # 6. finished requests leave the batch and free their KV
        fin_ids = self._finish(run, emit_ids, t1)
        self.now = t1
        result = StepResult(
            start=t0,
            end=t1,
            prefill_tokens=prefill_tokens,
            decode_seqs=n_decode,
            emitted_ids=emit_ids,
            emitted_counts=counts,
            itl=itl,
            first_token_ids=first_ids,
            finished_ids=fin_ids,
            prompt_tokens_done=prompt_done,
            preemptions=batch.preempted,
            prefix_queries=batch.queries,
            prefix_hits=batch.hits,
            num_drafts=drafts.drafts,
            num_draft_tokens=drafts.draft_tokens,
            num_accepted=drafts.accepted,
            accepted_per_pos=drafts.per_pos,
            num_running=len(self._running),
            num_waiting=len(self._waiting),
            kv_usage=self.kv_usage,
        )
        self._count(result)
        for observer in self._observers:
            observer(self, result)
        return result

    def _schedule_running(self) -> _Batch:
        """Steps 1 and 2: the running requests, in admission order, share the token budget; the KV cache keeps the
        longest prefix of them that fits once the tail is preempted."""
        t = self._t
        bs = self.block_size
        run = self._running
        comp = t.computed[run]
        tgt = t.target[run]
        prefilling = comp < tgt
        need = np.where(prefilling, tgt - comp, 1 + self.k)
        before = np.cumsum(need) - need
        chunk = np.minimum(np.maximum(self.max_num_batched_tokens - before, 0), need)
        held = t.blocks[run]
        new_blocks = np.where(chunk > 0, np.maximum(-(-(comp + chunk) // bs) + self.state_blocks - held, 0), 0)

        free = self.total_blocks - self._used_blocks
        n_new = int(new_blocks.sum())
        if n_new <= free:
            keep = len(run)
        else:
            cum_new = np.concatenate(([0], np.cumsum(new_blocks)))
            tail_held = np.concatenate((np.cumsum(held[::-1])[::-1], [0]))
            keep = int(np.count_nonzero(cum_new <= free + tail_held)) - 1
        n_preempted = len(run) - keep
        if n_preempted:
            self._preempt(run[keep:])
            run, comp, prefilling, chunk, held, new_blocks = (
                run[:keep],
                comp[:keep],
                prefilling[:keep],
                chunk[:keep],
                held[:keep],
                new_blocks[:keep],
            )
        t.blocks[run] = held + new_blocks
        self._used_blocks += int(new_blocks.sum())
        # (like vLLM, no admissions in a step that had to preempt: the KV cache is what is short)
        may_admit = n_preempted == 0 or keep == 0
        budget = self.max_num_batched_tokens - int(chunk.sum())
        return _Batch(run, comp, prefilling, chunk, n_preempted, may_admit, budget)

    def _preempt(self, victims: IntArray) -> None:
        """Free the victims' KV and put them back at the head of the queue, to recompute what they had."""
        t = self._t
        self._used_blocks -= int(t.blocks[victims].sum())
        t.blocks[victims] = 0
        t.computed[victims] = 0
        t.target[victims] = t.prompt[victims] + t.generated[victims]
        t.preempt[victims] += 1
        t.state[victims] = _WAITING
        self._waiting.extendleft(int(v) for v in victims[::-1])

    def _admit_waiting(self, batch: _Batch, t0: float) -> None:
        """Step 3: admit waiting requests while budget, slots and KV allow; they join the batch prefilling."""
        t = self._t
        bs = self.block_size
        sb = self.state_blocks
        admitted: list[int] = []
        admitted_chunks: list[int] = []
        budget = batch.budget
        n_run = len(batch.run)
        while self._waiting and budget > 0 and n_run < self.max_num_seqs:
            rid = self._waiting[0]
            target = int(t.target[rid])
            hits = self._prefix_lookup(rid) if self.prefix_caching else 0
            c = min(target - hits, budget)
            blocks = -(-(hits + c) // bs) + sb
            if blocks > self.total_blocks - self._used_blocks:
                break
            self._waiting.popleft()
            if self.prefix_caching:
                batch.queries += target
                batch.hits += hits
            if t.generated[rid] == 0:
                t.cached[rid] = hits
            t.computed[rid] = hits
            t.blocks[rid] = blocks
            self._used_blocks += blocks
            t.state[rid] = _RUNNING
            if math.isnan(t.scheduled[rid]):
                t.scheduled[rid] = t0
            admitted.append(rid)
            admitted_chunks.append(c)
            budget -= c
            n_run += 1
        if admitted:
            adm = np.asarray(admitted, np.int64)
            batch.run = np.concatenate((batch.run, adm))
            batch.comp = np.concatenate((batch.comp, t.computed[adm]))
            batch.prefilling = np.concatenate((batch.prefilling, np.ones(len(adm), bool)))
            batch.chunk = np.concatenate((batch.chunk, np.asarray(admitted_chunks, np.int64)))

    def _batch_seconds(
        self,
        comp: IntArray,
        chunk: IntArray,
        decoding: BoolArray,
        pre: BoolArray,
        reps: FloatArray,
        n_decode: int,
        prefill_tokens: int,
    ) -> float:
        """Step 4: the batch's time from the performance model."""
        mean_ctx = float(comp[decoding].sum()) / n_decode if n_decode else 0.0
        mean_rep = float(reps.sum()) / n_decode if n_decode else self.repetitiveness
        work = None
        if self._prefill_work and prefill_tokens:
            c = chunk[pre].astype(np.float64)
            work = float((c * (comp[pre] + c / 2.0)).sum())
        timing = self.perf.step(
            self.config,
            decode_seqs=n_decode,
            prefill_tokens=prefill_tokens,
            mean_context_tokens=mean_ctx,
            repetitiveness=mean_rep,
            prefill_attention_work=work,
        )
        return max(float(timing.seconds), 1e-9)

    def _speculate(self, decode_chunks: IntArray, reps: FloatArray, n_decode: int) -> _Drafts:
        """Speculative decoding: how many drafts each decoding sequence got accepted (none without a drafter)."""
        k = self.k
        if not (k and n_decode):
            return _Drafts(np.ones(n_decode, np.int64), 0, 0, 0, np.zeros(k, np.int64))
        drafts = np.minimum(decode_chunks - 1, k)
        probs = self._probs_for(reps)
        u = self._rng.random(n_decode)
        accepted = np.minimum((u[:, None] < probs).sum(axis=1), drafts)
        return _Drafts(
            1 + accepted,
            int(np.count_nonzero(drafts > 0)),
            int(drafts.sum()),
            int(accepted.sum()),
            (accepted[:, None] > np.arange(k)[None, :]).sum(axis=0).astype(np.int64),
        )

    def _emit(
        self, done_pre: IntArray, dec_ids: IntArray, dec_emit: IntArray, first_ids: IntArray, t1: float
    ) -> tuple[IntArray, IntArray, FloatArray]:
        """Tokens out at ``t1``: one per request whose prefill completed, 1 + accepted per decoding one (up to each
        request's stop). The emitters, their counts and the inter-token gaps of those that had emitted before."""
        t = self._t
        emit_ids = np.concatenate((done_pre, dec_ids))
        raw_emit = np.concatenate((np.ones(len(done_pre), np.int64), dec_emit))
        gen_before = t.generated[emit_ids]
        counts = np.minimum(raw_emit, t.stop_at[emit_ids] - gen_before)
        t.generated[emit_ids] = gen_before + counts
        t.computed[dec_ids] += dec_emit
        t.target[emit_ids] = t.computed[emit_ids]
        had_before = gen_before > 0
        itl = t1 - t.last_tok[emit_ids[had_before]]
        t.last_tok[emit_ids] = t1
        t.first_tok[first_ids] = t1
        if self.record_token_times:
            times = self._token_times
            for rid, c in zip(emit_ids.tolist(), counts.tolist(), strict=True):
                times[rid].extend([t1] * c)
        return emit_ids, counts, itl

    def _finish(self, run: IntArray, emit_ids: IntArray, t1: float) -> IntArray:
        """Step 6: requests that emitted their last token leave the batch and free their KV."""
        t = self._t
        fin_ids = emit_ids[t.generated[emit_ids] >= t.stop_at[emit_ids]]
        if len(fin_ids):
            t.state[fin_ids] = _FINISHED
            for rid in fin_ids.tolist():
                self._prefix_hashes[rid] = ()  # only needed while the request may still be (re)admitted
            t.finish[fin_ids] = t1
            t.reason[fin_ids] = np.where(t.generated[fin_ids] >= t.max_tokens[fin_ids], _LENGTH, _STOP)
            self._used_blocks -= int(t.blocks[fin_ids].sum())
            t.blocks[fin_ids] = 0
            self._running = run[~np.isin(run, fin_ids)]
        return fin_ids

    def _count(self, result: StepResult) -> None:
        c_ = self.counters
        c_.steps += 1
        c_.prompt_tokens += result.prompt_tokens_done
        c_.generation_tokens += int(result.emitted_counts.sum())
        c_.preemptions += result.preemptions
        c_.prefix_queries += result.prefix_queries
        c_.prefix_hits += result.prefix_hits
        c_.finished += len(result.finished_ids)
        c_.spec_drafts += result.num_drafts
        c_.spec_draft_tokens += result.num_draft_tokens
        c_.spec_accepted += result.num_accepted
        per_pos = result.accepted_per_pos
        for i in range(self.k):
            c_.spec_accepted_per_pos[i] += int(per_pos[i])

    def _reject_head(self, now: float) -> StepResult:
        """Nothing fits: the head of the queue can never run (longer than the KV cache); fail it like vLLM would."""
        t = self._t
        rid = self._waiting.popleft()
        t.state[rid] = _FINISHED
        t.reason[rid] = _ERROR
        self._prefix_hashes[rid] = ()
        t.finish[rid] = now
        empty = np.zeros(0, np.int64)
        result = StepResult(
            start=now,
            end=now,
            prefill_tokens=0,
            decode_seqs=0,
            emitted_ids=empty,
            emitted_counts=empty,
            itl=np.zeros(0),
            first_token_ids=empty,
            finished_ids=np.asarray([rid], np.int64),
            prompt_tokens_done=0,
            preemptions=0,
            prefix_queries=0,
            prefix_hits=0,
            num_drafts=0,
            num_draft_tokens=0,
            num_accepted=0,
            accepted_per_pos=np.zeros(self.k, np.int64),
            num_running=len(self._running),
            num_waiting=len(self._waiting),
            kv_usage=self.kv_usage,
        )
        for observer in self._observers:
            observer(self, result)
        return result

    def _probs_for(self, reps: FloatArray) -> FloatArray:
        first = float(reps[0])
        if np.all(reps == first):
            return self._acceptance_probs(first)[None, :]
        uniq, inverse = np.unique(reps, return_inverse=True)
        table = np.stack([self._acceptance_probs(float(r)) for r in uniq])
        return table[inverse]


class RealTimeDriver:
    """Runs a :class:`ReplicaEngine` against the wall clock on an asyncio loop.

    Engine time advances ``speedup`` times faster than real time: a step the model says takes 40 ms is slept for
    ``40 ms / speedup``. Tokens are published (through engine observers) when the step's sleep is over, so clients
    see them at the right moment.
    """

    def __init__(self, engine: ReplicaEngine, *, speedup: float = 1.0) -> None:
        if speedup <= 0:
            raise ValueError("speedup must be positive")
        self.engine = engine
        self.speedup = speedup
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._real0 = time.monotonic()
        self._virt0 = engine.now
        self._listeners: list[StepObserver] = []

    def engine_time(self) -> float:
        """The engine time that corresponds to now on the wall clock."""
        return self._virt0 + (time.monotonic() - self._real0) * self.speedup

    def add_listener(self, listener: StepObserver) -> None:
        """Called after each step's sleep, when its tokens are due."""
        self._listeners.append(listener)

    def submit(
        self,
        prompt_tokens: int,
        max_tokens: int,
        *,
        eos_after: int | None = None,
        repetitiveness: float | None = None,
        prefix_hashes: Sequence[int] = (),
    ) -> int:
        """Add a request arriving now (engine time) and wake the loop."""
        engine = self.engine
        arrival = self.engine_time()
        if not engine.has_work:
            engine.idle_until(arrival)
        rid = engine.add_request(
            prompt_tokens,
            max_tokens,
            arrival=min(arrival, engine.now),
            eos_after=eos_after,
            repetitiveness=repetitiveness,
            prefix_hashes=prefix_hashes,
        )
        self._wake.set()
        return rid

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="replica-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        engine = self.engine
        while True:
            if not engine.has_work:
                self._wake.clear()
                await self._wake.wait()
                continue
            engine.idle_until(self.engine_time())
            result = engine.step()
            if result is None:
                continue
            due = self._real0 + (result.end - self._virt0) / self.speedup
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            for listener in self._listeners:
                try:
                    listener(engine, result)
                except Exception:  # one broken listener must not stop the replica
                    log.exception("step listener %r failed", listener)
