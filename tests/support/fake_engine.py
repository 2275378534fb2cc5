"""A stand-in engine for load-generator and trial tests: an aiohttp server on loopback, in a background thread,
speaking the streaming ``/v1/completions`` subset the load generator uses, with ``/metrics`` and ``/health``."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field

from aiohttp import web

from controller.trials.engine.launchers import free_port


@dataclass
class FakeEngineState:
    token_delay_s: float = 0.001
    requests: int = 0
    generated: int = 0
    prompts: list[list[int]] = field(default_factory=list)  # prompts sent as token ids
    texts: list[str] = field(default_factory=list)  # prompts sent as text
    fail_every: int = 0  # answer HTTP 500 to every n-th request (0: never)


class FakeEngine:
    """An aiohttp server in a background thread speaking the streaming ``/v1/completions`` subset we use."""

    def __init__(self, state: FakeEngineState | None = None) -> None:
        self.state = state or FakeEngineState()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._runner: web.AppRunner | None = None

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        st = self.state
        st.requests += 1
        if st.fail_every and st.requests % st.fail_every == 0:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        prompt = body["prompt"]
        if isinstance(prompt, str):
            st.texts.append(prompt)
        else:
            st.prompts.append(list(prompt))
        n = int(body["max_tokens"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(n):
            await asyncio.sleep(st.token_delay_s)
            chunk = {"choices": [{"index": 0, "text": "x", "finish_reason": None}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        st.generated += n
        usage = {"choices": [], "usage": {"prompt_tokens": len(prompt), "completion_tokens": n}}
        await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _metrics(self, request: web.Request) -> web.Response:
        text = (
            "# TYPE vllm:generation_tokens counter\n"
            f'vllm:generation_tokens_total{{engine="0",model_name="fake"}} {self.state.generated}\n'
            "# TYPE vllm:num_preemptions counter\n"
            'vllm:num_preemptions_total{engine="0",model_name="fake"} 0\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            'vllm:kv_cache_usage_perc{engine="0",model_name="fake"} 0.25\n'
        )
        return web.Response(text=text, content_type="text/plain")

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, backlog=4096)
        self._loop.run_until_complete(site.start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())

    def __enter__(self) -> FakeEngine:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
