"""The agent's chat model: one of the operator admin's OpenAI-compatible endpoints (a hosted API, or the managed
vLLM itself), with the policy's limits (timeout, completion tokens, temperature).

Every request the chat model sends goes through :class:`BoundedTransport`: the answer is read whole within the
policy's ``llm.timeout_s`` in all (not per read) and :data:`MAX_ANSWER_BYTES`, and its JSON nesting is checked
before the client parses it (:mod:`controller.http_bounded`). The API key is registered with the scrubber
(:func:`controller.domain.scrub.register_secret`) when the model is made, and a failed call is described by its
HTTP status and kind (:func:`describe_failure`), never by the endpoint's answer.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx2
from langchain_openai import ChatOpenAI
from openai import APIConnectionError, APIStatusError, APITimeoutError
from pydantic import SecretStr

from controller import http_bounded
from controller.advisor.endpoints import AdvisorEndpoint
from controller.domain.scrub import register_secret, scrub_known, url_secrets
from controller.policy import LlmSettings

#: The longest chat answer read (a completion of ``llm.max_tokens`` is a few kilobytes).
MAX_ANSWER_BYTES = 1024 * 1024
#: Request headers the bounded request sets itself.
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "accept-encoding", "connection"})
#: Answer headers that no longer describe the body handed on (it is whole and unencoded).
_BODY_HEADERS = frozenset({"content-length", "transfer-encoding", "content-encoding", "connection"})


class BoundedTransport(httpx2.BaseTransport):
    """The chat client's transport: each request read whole within ``deadline_s`` and ``max_bytes``, its JSON
    nesting checked. A failure is raised as the client's own timeout, connection or protocol error, chained to
    the :class:`~controller.http_bounded.ReadFailed` that says its kind (quoting nothing of the answer)."""

    def __init__(self, deadline_s: float, *, max_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.limits = http_bounded.Limits(deadline_s, max_bytes=max_bytes)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _OWN_HEADERS}
        try:
            answer = http_bounded.request(
                request.method, str(request.url), limits=self.limits, headers=headers, content=request.read()
            )
            is_json = "json" in answer.headers.get("content-type", "").lower()
            if is_json and http_bounded.json_depth(answer.body) > self.limits.max_depth:
                raise http_bounded.ReadFailed("too-deep", f"JSON nested deeper than {self.limits.max_depth}")
        except http_bounded.ReadFailed as failure:
            if failure.kind == "deadline":
                raise httpx2.ReadTimeout(failure.describe(), request=request) from failure
            if failure.kind == "connection":
                raise httpx2.ConnectError(failure.describe(), request=request) from failure
            raise httpx2.RemoteProtocolError(failure.describe(), request=request) from failure
        kept = [(k, v) for k, v in answer.headers.items() if k.lower() not in _BODY_HEADERS]
        return httpx2.Response(answer.status, headers=kept, content=answer.body, request=request)


def _read_failure(exc: BaseException) -> http_bounded.ReadFailed | None:
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, http_bounded.ReadFailed):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def describe_failure(exc: BaseException) -> str:
    """Why a chat call failed, in Shiftlight's words: the HTTP status, or the kind of failure; never the
    endpoint's answer (which may echo the API key), and scrubbed of every registered secret all the same."""
    failure = _read_failure(exc)
    if isinstance(exc, APIStatusError):
        why = f"HTTP {exc.status_code} ({type(exc).__name__})"
    elif failure is not None:
        why = failure.describe()
    elif isinstance(exc, APITimeoutError):
        why = "timed out"
    elif isinstance(exc, APIConnectionError):
        why = "connection failed"
    elif isinstance(exc, OSError):  # raised by this host's network stack, not written by the endpoint
        why = f"{type(exc).__name__}: {str(exc)[:200]}"
    else:
        why = type(exc).__name__
    return scrub_known(why)


def make_chat_model(
    endpoint: AdvisorEndpoint, settings: LlmSettings, *, environ: Mapping[str, str] | None = None
) -> ChatOpenAI:
    """A ``ChatOpenAI`` on the admin's ``endpoint`` (URL, model, key) with the policy's ``settings`` (timeout,
    capped output, temperature), no hidden retries, and every answer read within bounds."""
    key = endpoint.api_key(environ)
    if key:
        register_secret(key)
    for secret in url_secrets(endpoint.base_url):
        register_secret(secret)
    http_client = httpx2.Client(transport=BoundedTransport(settings.timeout_s), timeout=settings.timeout_s)
    return ChatOpenAI(
        model=endpoint.model,
        base_url=endpoint.base_url,
        api_key=SecretStr(key or "unused"),  # local vLLM endpoints need no key
        timeout=settings.timeout_s,
        max_retries=0,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        http_client=http_client,
    )


__all__ = ["MAX_ANSWER_BYTES", "BoundedTransport", "describe_failure", "make_chat_model"]
