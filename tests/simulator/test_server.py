"""The simulated replica's vLLM HTTP surface, over real loopback HTTP against a server subprocess."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.simulator.metrics import (
    INTER_TOKEN_LATENCY_BUCKETS,
    ITERATION_TOKENS_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
)
from controller.simulator.profiles import load_model, model_names
from controller.simulator.protocol import tokenize

REPO = Path(__file__).resolve().parents[2]
GPU = "h200"
SPEC_K = 2
MAX_MODEL_LEN = 4096


def _mtp_model() -> str:
    for name in model_names():
        if load_model(name).has_mtp:
            return name
    raise AssertionError("no model profile with an MTP head")


MODEL = _mtp_model()


@dataclass
class Server:
    url: str
    name: str
    proc: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(config: dict[str, Any], name: str) -> Server:
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "controller.simulator.server",
        "--model",
        MODEL,
        "--gpu",
        GPU,
        "--config",
        json.dumps(config),
        "--port",
        str(port),
        "--speedup",
        "20",
        "--served-model-name",
        name,
        "--max-model-len",
        str(MAX_MODEL_LEN),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return Server(url, name, proc)
        except httpx.TransportError:
            time.sleep(0.1)
    _stop(proc)
    raise AssertionError("server did not become healthy")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def spec_server() -> Iterator[Server]:
    server = _start({"speculative_method": "mtp", "num_speculative_tokens": SPEC_K}, "sim-mtp")
    yield server
    _stop(server.proc)


@pytest.fixture(scope="module")
def plain_server() -> Iterator[Server]:
    server = _start({"max_num_seqs": 64}, "sim-plain")
    yield server
    _stop(server.proc)


def _sse(body: str) -> list[Any]:
    events = [line[len("data: ") :] for line in body.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def _families(server: Server) -> dict[str, Any]:
    text = httpx.get(server.url + "/metrics").text
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    fam = families.get(family)
    if fam is None:
        return 0.0
    total = 0.0
    for s in fam.samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            total += s.value
    return total


# ----- completions -----------------------------------------------------------------------------------------------
def test_completion_non_streaming_returns_requested_tokens(spec_server: Server) -> None:
    prompt = "Summarise the following log lines for the on-call engineer."
    r = httpx.post(
        spec_server.url + "/v1/completions",
        json={"model": spec_server.name, "prompt": prompt, "max_tokens": 37, "ignore_eos": True},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == spec_server.name
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert len(tokenize(choice["text"])) == 37
    prompt_tokens = math.ceil(len(prompt.encode()) / 4)
    assert body["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 37,
        "total_tokens": prompt_tokens + 37,
        "prompt_tokens_details": None,
    }


def test_completion_streaming_with_usage(spec_server: Server) -> None:
    r = httpx.post(
        spec_server.url + "/v1/completions",
        json={
            "prompt": list(range(100, 180)),
            "max_tokens": 50,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        timeout=30,
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    chunks = _sse(r.text)
    content, usage = chunks[:-1], chunks[-1]
    text = "".join(c["choices"][0]["text"] for c in content)
    assert len(tokenize(text)) == 50
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1])
    assert all(c["usage"] is None for c in content)
    assert usage["choices"] == [] and usage["usage"]["prompt_tokens"] == 80
    assert usage["usage"]["completion_tokens"] == 50
    # speculation: some steps emitted several tokens in one chunk
    assert len(content) < 50


def test_streaming_without_usage_has_no_usage_field(plain_server: Server) -> None:
    r = httpx.post(
        plain_server.url + "/v1/completions",
        json={"prompt": "hello", "max_tokens": 5, "ignore_eos": True, "stream": True},
        timeout=30,
    )
    chunks = _sse(r.text)
    assert len(chunks) == 5  # one token per step without speculation
    assert all("usage" not in c for c in chunks)


def test_without_ignore_eos_the_model_stops_by_itself(plain_server: Server) -> None:
    r = httpx.post(plain_server.url + "/v1/completions", json={"prompt": "a b c", "max_tokens": 600}, timeout=60)
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "stop"
    assert 16 <= body["usage"]["completion_tokens"] <= 512


def test_chat_completion_both_modes(plain_server: Server) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is KV cache?"}]
    r = httpx.post(
        plain_server.url + "/v1/chat/completions",
        json={"messages": messages, "max_completion_tokens": 12, "ignore_eos": True},
        timeout=30,
    )
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert len(tokenize(body["choices"][0]["message"]["content"])) == 12
    assert body["usage"]["completion_tokens"] == 12
    template = "<|system|>\nBe brief.\n<|user|>\nWhat is KV cache?\n<|assistant|>\n"
    assert body["usage"]["prompt_tokens"] == len(tokenize(template))

    r = httpx.post(
        plain_server.url + "/v1/chat/completions",
        json={
            "messages": messages,
            "max_tokens": 9,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        timeout=30,
    )
    chunks = _sse(r.text)
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-1])
    assert len(tokenize(content)) == 9
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 9


@pytest.mark.parametrize(
    ("path", "payload", "needle"),
    [
        ("/v1/completions", {"max_tokens": 5}, "prompt"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": MAX_MODEL_LEN}, "maximum context length"),
        ("/v1/completions", {"prompt": "x" * (4 * MAX_MODEL_LEN), "max_tokens": 1}, "maximum context length"),
        ("/v1/completions", {"prompt": "x", "n": 2}, "n > 1"),
        ("/v1/chat/completions", {"messages": []}, "messages"),
        ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, "role"),
    ],
)
def test_bad_requests_get_openai_400s(plain_server: Server, path: str, payload: dict[str, Any], needle: str) -> None:
    r = httpx.post(plain_server.url + path, json=payload, timeout=10)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == 400 and err["type"] == "BadRequestError"
    assert needle in err["message"]


def test_invalid_json_and_unknown_model(plain_server: Server) -> None:
    r = httpx.post(plain_server.url + "/v1/completions", content=b"{not json", timeout=10)
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = httpx.post(plain_server.url + "/v1/completions", json={"model": "other", "prompt": "x"}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["type"] == "NotFoundError"


def test_models_health_version(plain_server: Server) -> None:
    models = httpx.get(plain_server.url + "/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["sim-plain"]
    assert models["data"][0]["max_model_len"] == MAX_MODEL_LEN
    assert httpx.get(plain_server.url + "/health").status_code == 200
    assert "version" in httpx.get(plain_server.url + "/version").json()


# ----- metrics ---------------------------------------------------------------------------------------------------
def test_metrics_families_types_labels_and_buckets(spec_server: Server) -> None:
    httpx.post(spec_server.url + "/v1/completions", json={"prompt": "warm", "max_tokens": 8, "ignore_eos": True})
    fams = _families(spec_server)
    expected = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:cache_config_info": "gauge",
        "vllm:request_success": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:num_preemptions": "counter",
        "vllm:prefix_cache_queries": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:spec_decode_num_drafts": "counter",
        "vllm:spec_decode_num_draft_tokens": "counter",
        "vllm:spec_decode_num_accepted_tokens": "counter",
        "vllm:spec_decode_num_accepted_tokens_per_pos": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:request_time_per_output_token_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
        "vllm:request_inference_time_seconds": "histogram",
        "vllm:request_prefill_time_seconds": "histogram",
        "vllm:request_decode_time_seconds": "histogram",
        "vllm:request_prompt_tokens": "histogram",
        "vllm:request_generation_tokens": "histogram",
        "vllm:iteration_tokens_total": "histogram",
        "http_requests": "counter",
    }
    for name, kind in expected.items():
        assert name in fams, name
        assert fams[name].type == kind, name
    for fam in fams.values():
        if fam.name.startswith("vllm:") and fam.name != "vllm:cache_config_info":
            for s in fam.samples:
                assert s.labels["model_name"] == "sim-mtp" and s.labels["engine"] == "0", s
    # counters are exposed with _total
    assert any(s.name == "vllm:generation_tokens_total" for s in fams["vllm:generation_tokens"].samples)
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples if s.name.endswith("_total")}
    assert {"stop", "length", "abort"} <= reasons
    positions = {s.labels["position"] for s in fams["vllm:spec_decode_num_accepted_tokens_per_pos"].samples}
    assert positions == {str(i) for i in range(SPEC_K)}
    info = fams["vllm:cache_config_info"].samples[0]
    assert info.value == 1 and info.labels["speculative_method"] == "mtp" and info.labels["engine"] == "0"
    assert info.labels["num_speculative_tokens"] == str(SPEC_K) and "block_size" in info.labels

    def bounds(name: str) -> list[float]:
        les = [s.labels["le"] for s in fams[name].samples if s.name == name + "_bucket"]
        assert les[-1] == "+Inf"
        return [float(x) for x in les[:-1]]

    assert bounds("vllm:time_to_first_token_seconds") == list(TIME_TO_FIRST_TOKEN_BUCKETS)
    assert bounds("vllm:inter_token_latency_seconds") == list(INTER_TOKEN_LATENCY_BUCKETS)
    assert bounds("vllm:request_time_per_output_token_seconds") == list(INTER_TOKEN_LATENCY_BUCKETS)
    for name in (
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_inference_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
    ):
        assert bounds(name) == list(REQUEST_LATENCY_BUCKETS)
    assert bounds("vllm:iteration_tokens_total") == [float(b) for b in ITERATION_TOKENS_BUCKETS]
    one_two_five = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]  # capped at max_model_len = 4096
    assert bounds("vllm:request_prompt_tokens") == one_two_five
    assert bounds("vllm:request_generation_tokens") == one_two_five


def test_spec_decode_families_only_when_speculating(plain_server: Server) -> None:
    fams = _families(plain_server)
    assert "vllm:generation_tokens" in fams
    assert not [name for name in fams if name.startswith("vllm:spec_decode")]


def test_counters_move_by_exactly_what_was_served(spec_server: Server) -> None:
    # a first request puts the shared prompt prefix into the prefix cache
    prime = {"prompt": [7] * 64, "max_tokens": 1}
    assert httpx.post(spec_server.url + "/v1/completions", json=prime, timeout=30).status_code == 200
    before = _families(spec_server)
    sizes = [(40, 30), (7, 64), (300, 5), (1, 1), (120, 100)]

    async def serve_all() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=spec_server.url, timeout=60) as client:

            async def one(i: int, prompt: int, out: int) -> dict[str, Any]:
                stream = i % 2 == 0
                payload = {
                    "prompt": [7] * prompt,
                    "max_tokens": out,
                    "ignore_eos": True,
                    "stream": stream,
                    "stream_options": {"include_usage": True},
                }
                r = await client.post("/v1/completions", json=payload)
                assert r.status_code == 200
                usage: dict[str, Any] = _sse(r.text)[-1]["usage"] if stream else r.json()["usage"]
                return usage

            return await asyncio.gather(*(one(i, p, o) for i, (p, o) in enumerate(sizes)))

    usages = asyncio.run(serve_all())
    after = _families(spec_server)

    def delta(family: str, sample: str, **labels: str) -> float:
        return _value(after, family, sample, **labels) - _value(before, family, sample, **labels)

    assert [u["completion_tokens"] for u in usages] == [o for _, o in sizes]
    assert delta("vllm:prompt_tokens", "vllm:prompt_tokens_total") == sum(p for p, _ in sizes)
    assert delta("vllm:generation_tokens", "vllm:generation_tokens_total") == sum(o for _, o in sizes)
    assert delta("vllm:request_success", "vllm:request_success_total", finished_reason="length") == len(sizes)
    assert delta("vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_count") == len(sizes)
    assert delta("vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_count") == len(sizes)
    assert delta("vllm:request_generation_tokens", "vllm:request_generation_tokens_sum") == sum(o for _, o in sizes)
    http = delta("http_requests", "http_requests_total", handler="/v1/completions", method="POST", status="2xx")
    assert http == len(sizes)
    # every decode step of every request drafted k tokens, and accepted ones are among the drafted
    drafts = delta("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_drafts_total")
    drafted = delta("vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_draft_tokens_total")
    accepted = delta("vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and drafted == SPEC_K * drafts and 0 <= accepted <= drafted
    per_pos = sum(
        delta(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            position=str(i),
        )
        for i in range(SPEC_K)
    )
    assert per_pos == accepted
    # the shared 7-token prompts hit the prefix cache
    assert delta("vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total") > 0


def test_many_concurrent_streams(plain_server: Server) -> None:
    n = 96

    async def run() -> list[int]:
        limits = httpx.Limits(max_connections=n)
        async with httpx.AsyncClient(base_url=plain_server.url, timeout=120, limits=limits) as client:

            async def one(i: int) -> int:
                payload = {"prompt": f"stream {i}", "max_tokens": 20 + i % 7, "ignore_eos": True, "stream": True}
                r = await client.post("/v1/completions", json=payload)
                return len(tokenize("".join(c["choices"][0]["text"] for c in _sse(r.text))))

            return await asyncio.gather(*(one(i) for i in range(n)))

    assert asyncio.run(run()) == [20 + i % 7 for i in range(n)]
    fams = _families(plain_server)
    # max_num_seqs = 64 < 96 streams: some requests queued
    assert _value(fams, "vllm:request_queue_time_seconds", "vllm:request_queue_time_seconds_sum") > 0


def test_cli_refuses_a_bad_config() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "controller.simulator.server", "--model", MODEL, "--gpu", GPU, "--config", '{"k": 1}'],
        cwd=REPO,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert b"--config" in proc.stderr


def test_client_disconnect_aborts_the_request(plain_server: Server) -> None:
    before = _families(plain_server)
    payload = {"prompt": "bye", "max_tokens": 3000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", plain_server.url + "/v1/completions", json=payload, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # leave after the first token: the connection closes with the stream
    deadline = time.monotonic() + 60
    while True:
        fams = _families(plain_server)
        idle = _value(fams, "vllm:num_requests_running", "vllm:num_requests_running") == 0
        if idle or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert idle

    def delta(family: str, sample: str) -> float:
        return _value(fams, family, sample) - _value(before, family, sample)

    assert 1 <= delta("vllm:generation_tokens", "vllm:generation_tokens_total") < 3000
    # like vLLM, a request the client abandoned is not a success of any kind and has no latency sample
    assert delta("vllm:request_success", "vllm:request_success_total") == 0
    assert delta("vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_count") == 0
    assert _value(fams, "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc") == 0


@pytest.mark.parametrize(
    ("model", "config", "needle"),
    [
        (MODEL, '{"tensor_parallel_size": 64}', b"tensor_parallel_size 64"),
        ("no-such-model", "{}", b"no-such-model"),
    ],
)
def test_cli_reports_an_engine_that_cannot_start(model: str, config: str, needle: bytes) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "controller.simulator.server", "--model", model, "--gpu", GPU, "--config", config],
        cwd=REPO,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert b"engine failed to start" in proc.stderr and needle in proc.stderr
