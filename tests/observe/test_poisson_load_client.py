"""The observe tests' load client (``tests/observe/support.py``): a request whose connection is closed before any
answer is sent once more; an error answer is not, and every failure keeps its error for the assertion message."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator

import httpx

from tests.observe.support import KEEPALIVE_EXPIRY_S, RequestRecord, _one

#: vLLM's HTTP keep-alive (``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``'s default), seconds
VLLM_KEEP_ALIVE_S = 5.0
BODY = {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 4, "ignore_eos": True}


@contextlib.contextmanager
def scripted_server(answers: list[bytes | None]) -> Iterator[tuple[str, list[bytes]]]:
    """A loopback server answering its n-th connection's one request with ``answers[n]`` (None: close the connection
    without answering); yields its URL and the requests it read."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        for answer in answers:
            conn, _ = listener.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                while len(body) < length:
                    body += conn.recv(65536)
                seen.append(body)
                if answer is not None:
                    conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1/completions", seen
    finally:
        listener.close()


def answer(status: int, payload: dict[str, object]) -> bytes:
    body = json.dumps(payload).encode()
    head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
    return head.encode() + b"connection: close\r\n\r\n" + body


def send(url: str) -> RequestRecord:
    record = RequestRecord(start=0.0)

    async def main() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            # the load gathers its requests with return_exceptions: the record says what happened
            with contextlib.suppress(httpx.HTTPError):
                await _one(client, url, dict(BODY), record)

    asyncio.run(main())
    return record


def test_a_request_whose_connection_closes_unanswered_is_sent_once_more() -> None:
    ok = answer(200, {"usage": {"completion_tokens": 4, "prompt_tokens": 3}})
    with scripted_server([None, ok]) as (url, seen):
        record = send(url)
    assert record.ok and record.error == ""
    assert record.retried.startswith("RemoteProtocolError")
    assert (record.output_tokens, record.prompt_tokens) == (4, 3)
    assert len(seen) == 2 and seen[0] == seen[1]


def test_an_error_answer_is_not_sent_again_and_its_error_is_kept() -> None:
    with scripted_server([answer(500, {"error": "boom"})]) as (url, seen):
        record = send(url)
    assert not record.ok and record.retried == ""
    assert record.status == 500 and "500" in record.error
    assert len(seen) == 1


def test_two_unanswered_attempts_fail_with_the_second_error() -> None:
    with scripted_server([None, None]) as (url, seen):
        record = send(url)
    assert not record.ok
    assert record.retried.startswith("RemoteProtocolError") and record.error.startswith("RemoteProtocolError")
    assert len(seen) == 2


def test_idle_connections_expire_before_vllms_keep_alive() -> None:
    assert KEEPALIVE_EXPIRY_S < VLLM_KEEP_ALIVE_S
