"""``SHIFTLIGHT_LOG_FORMAT=json``: every record, kopf's per-object records included, is one JSON object on one line.

The records come from kopf's own logger adapters, built as kopf builds them for a handler (the object's body and
kopf's settings, whose queues and locks neither JSON nor ``copy`` can take), through a real logger and handler.
"""

from __future__ import annotations

import io
import json
import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from kopf._core.actions.loggers import LocalObjectLogger, ObjectLogger

from controller.reactor.logs import OperatorJsonFormatter, log_formatter
from controller.reactor.settings import OperatorSettings

BODY: kopf.RawBody = {
    "apiVersion": "shiftlight.dev/v1alpha1",
    "kind": "TunedService",
    "metadata": {"name": "workhorse", "namespace": "prod", "uid": "0b7e-11"},
    "spec": {},
}
REF = {
    "apiVersion": "shiftlight.dev/v1alpha1",
    "kind": "TunedService",
    "namespace": "prod",
    "name": "workhorse",
    "uid": "0b7e-11",
}


class Captured:
    def __init__(self, stream: io.StringIO, logger: logging.Logger) -> None:
        self.stream = stream
        # a logger of the test's own, outside the logging tree (pytest's log capture stays off it)
        self.logger = logger

    def records(self) -> list[dict[str, Any]]:
        lines = self.stream.getvalue().splitlines()
        parsed = [json.loads(line) for line in lines]
        assert all(isinstance(p, dict) for p in parsed), lines
        return parsed


@pytest.fixture
def captured() -> Iterator[Captured]:
    """kopf's object logger (``kopf.objects``) and a test logger, through the operator's JSON format."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(log_formatter(OperatorSettings.from_env({"SHIFTLIGHT_LOG_FORMAT": "json"})))
    own = logging.Logger("shiftlight.test", logging.DEBUG)
    own.addHandler(handler)
    kopf_objects = logging.getLogger("kopf.objects")
    saved = (kopf_objects.handlers[:], kopf_objects.level, kopf_objects.propagate)
    kopf_objects.handlers[:] = [handler]
    kopf_objects.setLevel(logging.DEBUG)
    kopf_objects.propagate = False
    try:
        yield Captured(stream, own)
    finally:
        kopf_objects.handlers[:], kopf_objects.level, kopf_objects.propagate = saved


def test_kopfs_handler_records_are_one_json_object_each_with_the_object(captured: Captured) -> None:
    settings = kopf.OperatorSettings()
    local = LocalObjectLogger(body=kopf.Body(BODY), settings=settings)
    posting = ObjectLogger(body=kopf.Body(BODY), settings=settings)
    local.info("Handler 'tunedservice_event' succeeded.")
    local.debug("Something has changed, but we are not interested (the essence is the same).")
    posting.info("Creation is processed: 1 succeeded; 0 failed.")
    try:
        raise RuntimeError("the API server went away")
    except RuntimeError:
        local.exception("Handler 'tunedservice_event' failed with an exception. Will retry.")

    records = captured.records()
    assert [r["message"] for r in records] == [
        "Handler 'tunedservice_event' succeeded.",
        "Something has changed, but we are not interested (the essence is the same).",
        "Creation is processed: 1 succeeded; 0 failed.",
        "Handler 'tunedservice_event' failed with an exception. Will retry.",
    ]
    assert [r["level"] for r in records] == ["INFO", "DEBUG", "INFO", "ERROR"]
    assert all(r["logger"] == "kopf.objects" and r["object"] == REF for r in records)
    assert all("settings" not in r and "k8s_ref" not in r and "k8s_skip" not in r for r in records)
    assert "RuntimeError: the API server went away" in records[-1]["exc_info"]


class Unprintable:
    def __str__(self) -> str:
        raise ValueError("no text for this one")


def test_any_extra_is_written_as_plain_json_and_private_ones_are_left_out(captured: Captured) -> None:
    extras = {
        "lock": threading.Lock(),
        "queue": queue.SimpleQueue(),
        "odd": Unprintable(),
        "ratio": float("nan"),
        "nested": {"ok": [1, 2.5, None], "q": queue.SimpleQueue()},
        "_private": "kept out",
    }
    captured.logger.warning("rolled back %s", "prod/workhorse", extra=extras)

    (record,) = captured.records()
    assert record["message"] == "rolled back prod/workhorse"
    assert record["level"] == "WARNING"
    assert "_private" not in record
    assert record["lock"].startswith("<unlocked _thread.lock")
    assert "SimpleQueue" in record["queue"]
    assert record["odd"] == "<Unprintable>"
    assert record["ratio"] == "nan"
    assert record["nested"]["ok"] == [1, 2.5, None]
    assert "SimpleQueue" in record["nested"]["q"]


def test_a_record_that_cannot_be_formatted_still_comes_out_as_one_object(captured: Captured) -> None:
    captured.logger.info("%d replicas", "three")

    (record,) = captured.records()
    assert (record["level"], record["logger"], record["message"]) == ("INFO", "shiftlight.test", "%d replicas")
    assert record["format_error"].startswith("TypeError")


def test_the_formatter_itself_never_raises() -> None:
    formatter = OperatorJsonFormatter()
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%(missing)s", ({"other": 1},), None)
    record.k8s_ref = {"name": Unprintable()}
    line = formatter.format(record)
    assert json.loads(line)["logger"] == "x"
