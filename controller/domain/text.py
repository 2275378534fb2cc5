"""Safe rendering: the one sanitiser for every string Shiftlight shows a person (``shiftctl``, Slack).

Much of what is shown comes from outside: a model name from the TunedService spec, a trial's reason from a canary's
log, an Event's message, an approver's comment. A terminal obeys control characters in any of them (ESC sequences
that clear the screen, move the cursor, colour a fake "Approved by sre-lead" line green, or write the clipboard
through OSC 52), and bidi controls reorder what the reader sees. So every such string passes through here:

* :func:`one_line` for a field shown on one line: C0 and C1 controls, DEL, and every invisible format character
  (Unicode category Cf: the bidi controls U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C, the zero-width
  space, joiners and no-break space U+200B-U+200D, U+2060, U+FEFF, the soft hyphen, the tag characters) are
  removed, so "sre\\u200b-lead" shows as the "sre-lead" it would pass for; tabs and line or paragraph breaks
  (``\\n``, ``\\r``, VT, FF, NEL, U+2028, U+2029) become one space, so a field cannot start a line of its own;
* :func:`block` for text meant to span lines: the same, except that ``\\n`` is kept;
* :func:`slack_mrkdwn` for Slack's mrkdwn (and the message's fallback ``text``): sanitised, then ``&``, ``<`` and ``>``
  escaped as Slack asks, so ``<!channel>``, ``<!here>``, ``<@U123>`` and ``<https://x|label>`` show as typed and
  notify or link nobody.

An ESC removed leaves the rest of its sequence as visible text (``[2J``), which is the point: the reader sees that
something was there.
"""

from __future__ import annotations

import re

from controller.domain.scrub import scrub_known

#: The bidi controls: embeddings and overrides, isolates, the marks, and the Arabic letter mark.
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
#: Every character of Unicode's category Cf (format: invisible, they change how the text around them shows), as
#: of Unicode 14; the bidi controls are among them.
FORMAT_CHARACTERS = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
#: What moves to a new line (or tabulates) in a terminal or a chat client: each becomes one space on one line.
_BREAKS = "\t\n\r\x0b\x0c\x85\u2028\u2029"
_ONE_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{BIDI_CONTROLS}{FORMAT_CHARACTERS}]")
_BLOCK = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029{BIDI_CONTROLS}{FORMAT_CHARACTERS}]")


def _replace(match: re.Match[str]) -> str:
    return " " if match.group(0) in _BREAKS else ""


def one_line(text: object) -> str:
    """``str(text)`` safe on one line: controls and format characters (bidi controls, zero-width characters)
    removed, breaks and tabs made spaces."""
    return _ONE_LINE.sub(_replace, str(text))


def block(text: object) -> str:
    """``str(text)`` safe as a multi-line block: as :func:`one_line`, except that line breaks stay (``\\r\\n`` and a
    lone ``\\r`` become ``\\n``; NEL, U+2028 and U+2029 a space)."""
    return _BLOCK.sub(_replace, str(text).replace("\r\n", "\n").replace("\r", "\n"))


def slack_escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters (mentions, links, entities), after
    removing any operator credential and URL userinfo (:func:`controller.domain.scrub.scrub_known`): every text
    sent to Slack passes here."""
    return scrub_known(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_mrkdwn(text: object, *, multiline: bool = False) -> str:
    """``str(text)`` as safe literal text inside a Slack mrkdwn field or a message's fallback ``text``."""
    return slack_escape(block(text) if multiline else one_line(text))


def is_safe(text: str, *, multiline: bool = False) -> bool:
    """Whether ``text`` holds nothing :func:`one_line` (or :func:`block`) would change."""
    return text == (block(text) if multiline else one_line(text))


__all__ = ["BIDI_CONTROLS", "FORMAT_CHARACTERS", "block", "is_safe", "one_line", "slack_escape", "slack_mrkdwn"]
