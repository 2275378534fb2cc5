"""No string takes a Slack channel or a reader's eye. A model name, a reason (from a canary's log), a field or a digest
note may hold ``<!channel>``, ``<!here>``, a user mention, a link, control characters, a fake "Approved by sre-lead"
line or right-to-left overrides; in every text field of every message, the fallback ``text`` included, they arrive
escaped and defanged: no ``<`` or ``>`` at all (Shiftlight's own markup never uses them), no control character but the
layout's line breaks, no field that starts a line of its own."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest

from controller.adapters.notify import slack_format as fmt
from controller.domain.actions import Notify, Severity
from controller.domain.observation import TargetRef
from controller.domain.text import BIDI_CONTROLS

pytestmark = pytest.mark.security

MENTIONS = "<!channel> <!here> <!everyone> <@U024BE7LH> <!subteam^S123> <https://evil.example/login|Open dashboard>"
FAKE_APPROVAL = "\n:white_check_mark: *Approved by sre-lead*\r\n\x1b[1;32mApproved by sre-lead\x1b[0m"
CONTROLS = "\x1b[2J\x1b]52;c;eA==\x07\x9b2J\u202eexe.txt\u202c\u2066\u2069\u200f\x08\u2028Approved by sre-lead"
HOSTILE = f"x {MENTIONS}{FAKE_APPROVAL}{CONTROLS} & more"

_UNSAFE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029{BIDI_CONTROLS}]")


def texts(node: Any, path: str = "") -> Iterator[tuple[str, str, str]]:
    """Every (path, text type, text) in a payload: mrkdwn, plain_text, and the fallback ``text``."""
    if isinstance(node, dict):
        if isinstance(node.get("text"), str):
            yield path, str(node.get("type", "fallback")), node["text"]
        for key, value in node.items():
            yield from texts(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from texts(value, f"{path}[{i}]")


def problems(payload: dict[str, Any]) -> list[str]:
    found = []
    for path, kind, text in texts(payload):
        if "<" in text or ">" in text:
            found.append(f"{path}: unescaped angle bracket in {text[:80]!r}")
        if _UNSAFE.search(text):
            found.append(f"{path}: control {sorted(set(_UNSAFE.findall(text)))!r}")
        if kind != "mrkdwn" and "\n" in text:
            found.append(f"{path}: a line break in a one-line {kind} text")
        for line in text.splitlines():
            if re.match(r"\W*(white_check_mark\W*)?Approved by sre-lead", line):
                found.append(f"{path}: a line of its own: {line!r}")
        if re.search(r"&(?!amp;|lt;|gt;)", text):
            found.append(f"{path}: an unescaped & in {text[:80]!r}")
    return found


TARGET = TargetRef(namespace="ml", name=f"llama{CONTROLS}", model=f"llama-8b {MENTIONS}")
TITLES = ["Approval needed", "Rolled back", "Rollout step 2", "Daily digest", "New config chosen", "Observation frozen"]


@pytest.mark.parametrize("title", TITLES)
def test_every_text_of_a_notification_is_escaped_and_defanged(title: str) -> None:
    fields = (("Throughput", f"1,000 → 1,500 {MENTIONS}"), (f"note{CONTROLS}", HOSTILE), ("kind", "generic"))
    for forced in (fields[:2], fields):  # by title, and forced to the generic kind
        notify = Notify(Severity.CRITICAL, f"{title} {HOSTILE}", HOSTILE, forced)
        payload = fmt.build_message(TARGET, notify, channel=f"#ops {MENTIONS}")
        assert problems(payload) == []
        assert "&lt;!channel&gt;" in payload["text"]  # the fallback: shown as typed, notifying nobody
        mrkdwn = [t for _, kind, t in texts(payload) if kind == "mrkdwn"]
        assert any("&lt;https://evil.example/login|Open dashboard&gt;" in t for t in mrkdwn)  # no link


def test_the_daily_digest_is_escaped_and_defanged() -> None:
    entry = fmt.DigestEntry(
        target=f"ml/llama {MENTIONS}",
        phase=HOSTILE,
        active_config=HOSTILE,
        gain=HOSTILE,
        candidate=HOSTILE,
        canary_weight=25,
        note=HOSTILE,
    )
    payload = fmt.digest_message(date(2026, 12, 1), [entry], channel=HOSTILE)
    assert problems(payload) == []


def test_escaping_happens_once() -> None:
    payload = fmt.build_message(TARGET, Notify(Severity.INFO, "New config chosen", "a & b < c"), channel="")
    assert "a &amp; b &lt; c" in payload["text"] and "&amp;amp;" not in str(payload)
