"""A vLLM-compatible HTTP server in front of one simulated replica.

Endpoints (the subset of vLLM's OpenAI server that load generators, gateways and Prometheus use):

* ``POST /v1/completions`` and ``POST /v1/chat/completions``: streaming (server-sent events, ``data: {...}`` chunks
  and a final ``data: [DONE]``) and non-streaming, with ``usage``; ``max_tokens`` (``max_completion_tokens`` for
  chat), ``ignore_eos``, ``stream_options.include_usage``; OpenAI-style 400 errors for bad requests and 404 for an
  unknown model name;
* ``GET /v1/models``, ``GET /health`` (and ``/ping``), ``GET /version``, ``GET /metrics`` (see
  :mod:`controller.simulator.metrics`).

The engine runs in real time, optionally sped up (``--speedup 10`` makes a 40 ms step take 4 ms); every
timing the server reports (metrics, usage) is in engine time. The wire format (tokenizer approximation, request
models, errors) lives in :mod:`controller.simulator.protocol`.

**Tokenizer approximation.** There are no weights and no vocabulary, so text is tokenized deterministically as one
token per 4 bytes of UTF-8 (rounded up): ``"Hello world"`` (11 bytes) is 3 tokens. A ``prompt`` given as a list of
token ids is used as is. Chat messages are rendered as ``<|role|>\\ncontent\\n`` per message plus
``<|assistant|>\\n`` and tokenized the same way. Generated text is made of 4-byte words (``" the"``, ``" sim"``,
...), one per token, so re-tokenizing a completion gives back its token count.

**End of sequence.** With ``ignore_eos`` the model generates exactly ``max_tokens`` tokens. Without it the simulated
model stops by itself (finish reason ``stop``) after a length derived from a hash of the prompt, between 16 and 512
tokens, or at ``max_tokens`` (finish reason ``length``) if that comes first.

The command line that starts one is :mod:`controller.simulator.server`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from controller.simulator.engine import RealTimeDriver, ReplicaEngine, StepResult
from controller.simulator.metrics import ReplicaMetrics
from controller.simulator.protocol import (
    VERSION,
    VOCAB_SIZE,
    ChatCompletionRequest,
    CompletionRequest,
    RequestError,
    SamplingRequest,
    block_hashes,
    check_lengths,
    detokenize,
    error_response,
    natural_length,
    parse_body,
    render_chat,
    tokenize,
    usage_block,
)


# ----- the replica --------------------------------------------------------------------------------------------------
@dataclass
class _Stream:
    queue: asyncio.Queue[tuple[int, bool]] = field(default_factory=asyncio.Queue)


class SimulatedServer:
    """One replica: engine, real-time driver, metrics and the aiohttp application around them."""

    def __init__(
        self,
        engine: ReplicaEngine,
        *,
        served_model_name: str,
        speedup: float = 1.0,
        engine_index: int = 0,
        vocab_size: int = VOCAB_SIZE,
    ) -> None:
        self.engine = engine
        self.vocab_size = vocab_size
        self.served_model_name = served_model_name
        self.driver = RealTimeDriver(engine, speedup=speedup)
        self.metrics = ReplicaMetrics(
            model_name=served_model_name,
            config=engine.config,
            max_model_len=engine.max_model_len,
            engine_index=engine_index,
            block_size=engine.block_size,
            num_gpu_blocks=engine.total_blocks,
        )
        self.created = int(time.time())
        self._streams: dict[int, _Stream] = {}
        self.driver.add_listener(self.metrics.on_step)
        self.driver.add_listener(self._publish)

    # ----- engine -> streams -------------------------------------------------------------------------------------
    def _publish(self, engine: ReplicaEngine, result: StepResult) -> None:
        if not self._streams:
            return
        finished = set(result.finished_ids.tolist())
        for rid, count in zip(result.emitted_ids.tolist(), result.emitted_counts.tolist(), strict=True):
            stream = self._streams.get(rid)
            if stream is not None:
                stream.queue.put_nowait((count, rid in finished))

    # ----- application -------------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/ping", self._health)
        app.router.add_post("/ping", self._health)
        app.router.add_get("/version", self._version)
        app.router.add_get("/metrics", self._metrics)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, _app: web.Application) -> None:
        self.driver.start()

    async def _on_cleanup(self, _app: web.Application) -> None:
        await self.driver.stop()

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        resource = request.match_info.route.resource
        path = resource.canonical if resource is not None else request.path
        try:
            response = await handler(request)
        except RequestError as err:
            response = error_response(err)
        except web.HTTPException as exc:
            if exc.status >= 400:
                kind = "NotFoundError" if exc.status == 404 else type(exc).__name__
                response = error_response(RequestError(exc.reason, status=exc.status, err_type=kind))
            else:
                raise
        if not request.get("counted"):
            self.metrics.observe_http(handler=path, method=request.method, status=response.status)
        return response

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _version(self, _request: web.Request) -> web.Response:
        return web.json_response({"version": VERSION})

    async def _metrics(self, _request: web.Request) -> web.Response:
        self.metrics.sync_gauges(self.engine)
        return web.Response(body=self.metrics.render(), headers={"Content-Type": self.metrics.content_type})

    async def _models(self, _request: web.Request) -> web.Response:
        name = self.served_model_name
        card = {
            "id": name,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": name,
            "parent": None,
            "max_model_len": self.engine.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    # ----- generation --------------------------------------------------------------------------------------------
    def _check_model(self, name: str | None) -> None:
        if name is not None and name != self.served_model_name:
            raise RequestError(
                f"The model `{name}` does not exist.", status=404, err_type="NotFoundError", param="model"
            )

    def _submit(self, token_ids: list[int], max_tokens: int, ignore_eos: bool) -> tuple[int, _Stream]:
        eos_after = None if ignore_eos else natural_length(token_ids)
        rid = self.driver.submit(
            len(token_ids),
            max_tokens,
            eos_after=eos_after,
            prefix_hashes=block_hashes(token_ids, self.engine.block_size),
        )
        stream = _Stream()
        self._streams[rid] = stream
        return rid, stream

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await parse_body(request, CompletionRequest)
        self._check_model(body.model)
        if body.n != 1:
            raise RequestError("n > 1 is not supported by the simulator", param="n")
        prompt: object = body.prompt
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            if len(prompt) != 1:
                raise RequestError("batched prompts are not supported by the simulator; send one prompt per request")
            prompt = prompt[0]
        if isinstance(prompt, str):
            token_ids = tokenize(prompt)
        else:
            assert isinstance(prompt, list)
            token_ids = [int(t) for t in prompt]
            if any(t < 0 or t >= self.vocab_size for t in token_ids):
                raise RequestError(f"token ids must be in [0, {self.vocab_size})", param="prompt")
        max_tokens = check_lengths(len(token_ids), body.max_tokens, self.engine.max_model_len)
        return await self._generate(request, body, token_ids, max_tokens, chat=False)

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await parse_body(request, ChatCompletionRequest)
        self._check_model(body.model)
        if body.n != 1:
            raise RequestError("n > 1 is not supported by the simulator", param="n")
        token_ids = tokenize(render_chat(body.messages))
        requested = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        max_tokens = check_lengths(len(token_ids), requested, self.engine.max_model_len)
        return await self._generate(request, body, token_ids, max_tokens, chat=True)

    async def _generate(
        self, request: web.Request, body: SamplingRequest, token_ids: list[int], max_tokens: int, *, chat: bool
    ) -> web.StreamResponse:
        rid, stream = self._submit(token_ids, max_tokens, body.ignore_eos)
        prefix = "chatcmpl-" if chat else "cmpl-"
        ident = prefix + uuid.uuid4().hex
        created = int(time.time())
        try:
            if body.stream:
                include_usage = bool(body.stream_options and body.stream_options.include_usage)
                return await self._stream(request, rid, stream, ident, created, len(token_ids), include_usage, chat)
            produced = 0
            done = False
            while not done:
                count, done = await stream.queue.get()
                produced += count
            record = self.engine.record(rid)
            usage = usage_block(len(token_ids), produced)
            text = detokenize(0, produced)
            if chat:
                choice: dict[str, Any] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "tool_calls": []},
                    "logprobs": None,
                    "finish_reason": record.finish_reason,
                    "stop_reason": None,
                }
            else:
                choice = {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": record.finish_reason,
                    "stop_reason": None,
                }
            payload = {
                "id": ident,
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": self.served_model_name,
                "choices": [choice],
                "usage": usage,
            }
            return web.json_response(payload)
        finally:
            self._streams.pop(rid, None)
            if not self.engine.record(rid).done:
                self.engine.abort(rid)

    async def _stream(
        self,
        request: web.Request,
        rid: int,
        stream: _Stream,
        ident: str,
        created: int,
        prompt_len: int,
        include_usage: bool,
        chat: bool,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
            payload: dict[str, Any] = {
                "id": ident,
                "object": obj,
                "created": created,
                "model": self.served_model_name,
                "choices": choices,
            }
            if include_usage:
                payload["usage"] = usage
            return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"

        try:
            await self._stream_chunks(request, response, rid, stream, chunk, prompt_len, include_usage, chat)
        except ConnectionResetError:  # the client went away: the caller aborts the request
            request["counted"] = True
        return response

    async def _stream_chunks(
        self,
        request: web.Request,
        response: web.StreamResponse,
        rid: int,
        stream: _Stream,
        chunk: Callable[..., bytes],
        prompt_len: int,
        include_usage: bool,
        chat: bool,
    ) -> None:
        if chat:
            first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            await response.write(chunk([first]))
        produced = 0
        done = False
        while not done:
            count, done = await stream.queue.get()
            text = detokenize(produced, count)
            produced += count
            reason = self.engine.record(rid).finish_reason if done else None
            if chat:
                choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "logprobs": None}
            else:
                choice = {"index": 0, "text": text, "logprobs": None}
            choice["finish_reason"] = reason
            choice["stop_reason"] = None
            await response.write(chunk([choice]))
        if include_usage:
            await response.write(chunk([], usage_block(prompt_len, produced)))
        resource = request.match_info.route.resource
        handler = resource.canonical if resource is not None else request.path
        self.metrics.observe_http(handler=handler, method=request.method, status=200)
        request["counted"] = True
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
