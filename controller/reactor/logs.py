"""The operator's logs: ``SHIFTLIGHT_LOG_FORMAT=text`` (one human-readable line per record) or ``json`` (one JSON
object per record, whatever the record carries).

kopf's per-object records carry its settings object (queues, locks, events: nothing JSON or ``copy`` can take) and
the object's reference as extras; a record's extras may be anything a library put there. The JSON formatter turns
every extra into plain JSON values (a string where nothing better fits), leaves out private and kopf-internal ones,
writes kopf's object reference as ``object``, and never raises: a record it cannot format still comes out as one
JSON object with its message and the reason.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from datetime import date, datetime, time
from enum import Enum
from typing import TYPE_CHECKING, Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from controller.domain.text import block, one_line

if TYPE_CHECKING:
    from controller.reactor.settings import OperatorSettings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
JSON_FIELDS = {"asctime": "time", "levelname": "level", "name": "logger"}
#: Extras kopf puts on its records for its own use: the operator's settings, whether to post a Kubernetes Event,
#: and the object reference (written as ``object`` instead).
KOPF_EXTRAS = ("settings", "k8s_skip", "k8s_ref")
REF_KEYS = ("apiVersion", "kind", "namespace", "name", "uid")
MAX_TEXT = 2000
"""The longest string an extra becomes (a value's text beyond it is cut)."""
MAX_DEPTH = 4
MAX_ITEMS = 100

JSONValue = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]


def _text(value: object) -> str:
    try:
        text = str(value)
    except Exception:  # a value whose __str__ fails is still named
        text = f"<{type(value).__name__}>"
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def plain(value: object, depth: int = 0) -> JSONValue:
    """``value`` as plain JSON values: scalars as they are (a non-finite float as its text), dates in ISO 8601,
    enums as their value, mappings and sequences item by item (at most :data:`MAX_ITEMS`, :data:`MAX_DEPTH` deep),
    anything else as its text."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Enum):
        return plain(value.value, depth + 1)
    if depth < MAX_DEPTH:
        if isinstance(value, Mapping):
            return {_text(k): plain(v, depth + 1) for k, v in list(value.items())[:MAX_ITEMS]}
        if isinstance(value, list | tuple | set | frozenset):
            return [plain(v, depth + 1) for v in list(value)[:MAX_ITEMS]]
    return _text(value)


class OperatorJsonFormatter(JsonFormatter):
    """One JSON object per record: ``time``, ``level``, ``logger``, ``message``, kopf's ``object`` reference when
    the record is about an object, the exception's traceback as ``exc_info``, and the record's other public extras
    as plain JSON values."""

    def __init__(self) -> None:
        super().__init__(
            TEXT_FORMAT,
            rename_fields=dict(JSON_FIELDS),
            reserved_attrs=[*RESERVED_ATTRS, *KOPF_EXTRAS],
            json_default=_text,
        )

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_data, record, message_dict)
        for key in [k for k in log_data if k.startswith("_")]:
            del log_data[key]
        for key, value in log_data.items():
            log_data[key] = plain(value)
        ref = getattr(record, "k8s_ref", None)
        if isinstance(ref, Mapping):
            log_data["object"] = {k: plain(ref[k]) for k in REF_KEYS if ref.get(k) is not None}

    def format(self, record: logging.LogRecord) -> str:
        try:
            return super().format(record)
        except Exception as exc:  # a log line must never be lost to its formatting
            return json.dumps(
                {
                    "time": self.formatTime(record, self.datefmt),
                    "level": record.levelname,
                    "logger": record.name,
                    "message": _text(record.msg),
                    "args": _text(record.args),
                    "format_error": f"{type(exc).__name__}: {_text(exc)}",
                }
            )


class TextFormatter(logging.Formatter):
    """The text format, made safe (:mod:`controller.domain.text`): a record's line is one line without controls or
    invisible characters (a tenant's text in a message, a policy name or a refusal, cannot drive a terminal or start
    a forged log line of its own), and a traceback keeps its lines but loses the same characters."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return block(super().formatException(ei))


def log_formatter(settings: OperatorSettings) -> logging.Formatter:
    """``SHIFTLIGHT_LOG_FORMAT``: ``json`` gives one JSON object per record (:class:`OperatorJsonFormatter`),
    ``text`` one safe line (:class:`TextFormatter`)."""
    if settings.log_format == "json":
        return OperatorJsonFormatter()
    return TextFormatter(TEXT_FORMAT)


def configure_logging(settings: OperatorSettings) -> None:
    """The root logger at ``SHIFTLIGHT_LOG_LEVEL``, in ``SHIFTLIGHT_LOG_FORMAT``, on stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(log_formatter(settings))
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper(), logging.INFO), handlers=[handler], force=True
    )
