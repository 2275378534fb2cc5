"""The OpenAI-compatible wire format of the simulated vLLM server: the tokenizer approximation, the validated
request models, OpenAI-style errors and the ``usage`` block (see :mod:`controller.simulator.server`)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: Version string reported on ``/version``: the vLLM API generation the simulator mimics, tagged as simulated.
VERSION = "0.32.0+shiftlight.sim"
BYTES_PER_TOKEN = 4
VOCAB_SIZE = 32_000
_WORDS: tuple[str, ...] = (
    " the",
    " sim",
    " and",
    " for",
    " ran",
    " one",
    " new",
    " way",
    " key",
    " log",
    " map",
    " set",
    " run",
    " row",
    " fit",
    " use",
)
_EOS_MIN, _EOS_SPAN = 16, 497
_M = TypeVar("_M", bound=BaseModel)


# ----- tokenizer approximation -------------------------------------------------------------------------------------
def tokenize(text: str) -> list[int]:
    """Deterministic token ids: one per 4 UTF-8 bytes (see the module docstring), in ``[0, 32000)``."""
    data = text.encode()
    return [
        int.from_bytes(data[i : i + BYTES_PER_TOKEN], "little") % VOCAB_SIZE
        for i in range(0, len(data), BYTES_PER_TOKEN)
    ]


def render_chat(messages: Sequence[ChatMessage]) -> str:
    """The chat template: ``<|role|>\\ncontent\\n`` per message, then the assistant's turn."""
    parts = [f"<|{m.role}|>\n{m.text()}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


def detokenize(start: int, count: int) -> str:
    """Text of generated tokens ``start .. start + count - 1``."""
    return "".join(_WORDS[i % len(_WORDS)] for i in range(start, start + count))


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the prompt's full KV blocks (what vLLM's prefix cache keys on)."""
    hashes: list[int] = []
    parent = 0
    for i in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[i : i + block_size])))
        hashes.append(parent)
    return hashes


def natural_length(token_ids: Sequence[int]) -> int:
    """Where the simulated model would emit end-of-sequence for this prompt (16..512 tokens)."""
    digest = zlib.crc32(b"".join(t.to_bytes(4, "little") for t in token_ids[:4096]))
    return _EOS_MIN + digest % _EOS_SPAN


# ----- request models (validated input) ----------------------------------------------------------------------------
class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class SamplingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    n: int = Field(default=1, ge=1)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)


class CompletionRequest(SamplingRequest):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str = Field(min_length=1)
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


class RequestError(Exception):
    """An OpenAI-style error answer."""

    def __init__(self, message: str, *, status: int = 400, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.err_type = err_type
        self.param = param


def error_response(err: RequestError) -> web.Response:
    body = {"error": {"message": str(err), "type": err.err_type, "param": err.param, "code": err.status}}
    return web.json_response(body, status=err.status)


def validation_message(exc: ValidationError) -> tuple[str, str | None]:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    return f"{loc}: {first['msg']}", loc or None


async def parse_body(request: web.Request, model: type[_M]) -> _M:
    """The request body validated as ``model``; a :class:`RequestError` naming the field otherwise."""
    try:
        payload = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise RequestError("request body must be a JSON object")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        message, param = validation_message(exc)
        raise RequestError(message, param=param) from exc


def check_lengths(prompt_len: int, max_tokens: int | None, limit: int) -> int:
    """The output tokens to generate: ``max_tokens``, or what is left of the context; vLLM's 400 errors otherwise."""
    if prompt_len < 1:
        raise RequestError("The prompt is empty; it must contain at least one token.", param="prompt")
    if prompt_len >= limit:
        raise RequestError(
            f"This model's maximum context length is {limit} tokens. However, your prompt contains "
            f"{prompt_len} input tokens, which exceeds this limit even without any output tokens. "
            "Please reduce the length of the input prompt.",
            param="input_tokens",
        )
    if max_tokens is None:
        return limit - prompt_len
    if prompt_len + max_tokens > limit:
        raise RequestError(
            f"This model's maximum context length is {limit} tokens. However, you requested {max_tokens} "
            f"output tokens and your prompt contains {prompt_len} input tokens, for a total of "
            f"{prompt_len + max_tokens} tokens. Please reduce the length of the input prompt or the number of "
            "requested output tokens.",
            param="max_tokens",
        )
    return max_tokens


def usage_block(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


__all__ = [
    "BYTES_PER_TOKEN",
    "VERSION",
    "VOCAB_SIZE",
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "RequestError",
    "SamplingRequest",
    "StreamOptions",
    "TextPart",
    "block_hashes",
    "check_lengths",
    "detokenize",
    "error_response",
    "natural_length",
    "parse_body",
    "render_chat",
    "tokenize",
    "usage_block",
    "validation_message",
]
