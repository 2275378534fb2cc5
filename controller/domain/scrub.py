"""The one scrubber for credentials: a text without a secret, its fragments or its escaped forms.

An upstream that echoes what it was sent (a proxy repeating the ``Authorization`` header in its error page, a JSON
body quoting it, a log line URL-encoding it) may repeat a token whole, in part, or escaped. :func:`scrub` removes,
wherever it occurs in ``text``:

* the secret itself, and any run of at least :func:`fragment_length` of its consecutive characters (so each half of
  a token of 12 characters or more, and any longer piece of it);
* the same inside escaped text: ``\\u0067``/``\\x67`` escapes, JSON's ``\\"``, ``\\\\`` and ``\\/``, URL
  percent-encoding and HTML numeric entities, in any mix and nested up to three times (a JSON-escaped ``\\u``
  escape, say). The escaped span is removed whole.

Pure: no I/O, no logging. Use :func:`redactor` to build the function once per secret.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

REDACTED = "<redacted>"
#: The shortest fragment of a secret that is removed (shorter runs are too likely to be ordinary text).
MIN_FRAGMENT = 6
#: How many layers of escaping are undone.
MAX_UNESCAPE = 3

_ESCAPE = re.compile(
    r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})|\\x([0-9A-Fa-f]{2})|\\([\\/\"'])|%([0-9A-Fa-f]{2})"
    r"|&#[xX]([0-9A-Fa-f]{1,6});|&#([0-9]{1,7});"
)

E = TypeVar("E", bound=BaseException)

#: One character of a (possibly unescaped) text and the span of the original text it came from.
_Char = tuple[str, int, int]


def fragment_length(secret: str) -> int:
    """The fragment length scrubbed for ``secret``: a quarter of it, at least :data:`MIN_FRAGMENT`, at most all."""
    return min(len(secret), max(MIN_FRAGMENT, len(secret) // 4))


def _unescape(chars: list[_Char]) -> list[_Char]:
    """One layer of escapes undone; each resulting character keeps the original span it came from."""
    text = "".join(c for c, _, _ in chars)
    out: list[_Char] = []
    at = 0
    for match in _ESCAPE.finditer(text):
        out.extend(chars[at : match.start()])
        hexa = match.group(1) or match.group(2) or match.group(3) or match.group(5) or match.group(6)
        if hexa is not None:
            code = int(hexa, 16)
        elif match.group(7) is not None:
            code = int(match.group(7))
        else:
            code = ord(match.group(4))
        if code > 0x10FFFF:
            out.extend(chars[match.start() : match.end()])
        else:
            out.append((chr(code), chars[match.start()][1], chars[match.end() - 1][2]))
        at = match.end()
    out.extend(chars[at:])
    return out


def _spans(chars: list[_Char], grams: frozenset[str], k: int) -> list[tuple[int, int]]:
    text = "".join(c for c, _, _ in chars)
    return [(chars[i][1], chars[i + k - 1][2]) for i in range(len(text) - k + 1) if text[i : i + k] in grams]


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def redactor(secret: str, replacement: str = REDACTED) -> Callable[[str], str]:
    """A function that scrubs ``secret`` (see the module's doc) from any text; the identity for an empty secret."""
    if not secret:
        return lambda text: text
    k = fragment_length(secret)
    grams = frozenset(secret[i : i + k] for i in range(len(secret) - k + 1))

    def scrub_text(text: str) -> str:
        chars: list[_Char] = [(c, i, i + 1) for i, c in enumerate(text)]
        spans = _spans(chars, grams, k)
        for _ in range(MAX_UNESCAPE):
            unescaped = _unescape(chars)
            if len(unescaped) == len(chars):
                break
            chars = unescaped
            spans += _spans(chars, grams, k)
        out, at = [], 0
        for start, end in _merge(spans):
            out += [text[at:start], replacement]
            at = end
        out.append(text[at:])
        return "".join(out)

    return scrub_text


def scrub(text: str, secret: str, replacement: str = REDACTED) -> str:
    """``text`` without ``secret``, its fragments or its escaped forms."""
    return redactor(secret, replacement)(text)


def scrubbed_error(exc: E, secret: str, replacement: str = REDACTED) -> E:
    """``exc`` with its message scrubbed of ``secret``, no longer chained to what it was raised from (a traceback
    would print the cause's text, which the scrubber has not seen)."""
    if secret:
        exc.args = tuple(scrub(a, secret, replacement) if isinstance(a, str) else a for a in exc.args)
    exc.__cause__, exc.__suppress_context__ = None, True
    return exc


__all__ = ["MAX_UNESCAPE", "MIN_FRAGMENT", "REDACTED", "fragment_length", "redactor", "scrub", "scrubbed_error"]
