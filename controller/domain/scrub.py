"""The one scrubber for credentials: a text without a secret, its fragments or its escaped forms.

An upstream that echoes what it was sent (a proxy repeating the ``Authorization`` header in its error page, a JSON
body quoting it, a log line URL-encoding it) may repeat a token whole, in part, or escaped. :func:`scrub` removes,
wherever it occurs in ``text``:

* the secret itself, and any run of at least :func:`fragment_length` of its consecutive characters (so each half of
  a token of 12 characters or more, and any longer piece of it);
* the same inside escaped text: ``\\u0067``/``\\x67`` escapes, JSON's ``\\"``, ``\\\\`` and ``\\/``, URL
  percent-encoding and HTML numeric entities, in any mix and nested up to three times (a JSON-escaped ``\\u``
  escape, say). The escaped span is removed whole.

Each secret is looked for in every form an upstream may repeat it in (:func:`secret_forms`): itself, URL-encoded,
hex (lower or upper case) and base64 (standard and URL-safe, with or without padding, at each of the three byte
alignments it may start at inside a longer encoded text), all matched without regard to case.

The operator's credentials (the LLM API key, the Prometheus and Grafana tokens, a URL's ``user:password``) are
registered once, where the settings that hold them are read (:func:`register_secret`); :func:`scrub_known` removes
every registered one, and any URL's userinfo (:func:`strip_userinfo`), from a text a tenant or Slack will read.

No I/O, no logging. Use :func:`redactor` to build the function once per secret.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Callable, Iterable
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


def _spans(chars: list[_Char], grams: dict[int, frozenset[str]]) -> list[tuple[int, int]]:
    text = "".join(c for c, _, _ in chars).lower()
    return [
        (chars[i][1], chars[i + k - 1][2])
        for k, of_k in grams.items()
        for i in range(len(text) - k + 1)
        if text[i : i + k] in of_k
    ]


def _base64_cores(raw: bytes) -> set[str]:
    """The base64 characters that depend on ``raw`` alone, wherever ``raw`` starts inside a longer encoded text (at
    offset 0, 1 or 2 of a 3-byte group), in the standard and the URL-safe alphabet."""
    out: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + raw).decode()
        first = -(-8 * offset // 6)  # the first character with no bit of the prefix
        last = 8 * (offset + len(raw)) // 6  # past the last character with no bit of what follows
        core = encoded[first:last]
        if core:
            out |= {core, core.translate(str.maketrans("+/", "-_"))}
    return out


def secret_forms(secret: str) -> tuple[str, ...]:
    """``secret`` as an upstream may repeat it: itself, URL-encoded, hex and base64 (see the module's doc)."""
    raw = secret.encode()
    forms = {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret), raw.hex()}
    forms |= _base64_cores(raw)
    return tuple(sorted(f for f in forms if f))


def _grams(forms: Iterable[str]) -> dict[int, frozenset[str]]:
    by_k: dict[int, set[str]] = {}
    for form in forms:
        low = form.lower()
        k = fragment_length(low)
        by_k.setdefault(k, set()).update(low[i : i + k] for i in range(len(low) - k + 1))
    return {k: frozenset(v) for k, v in by_k.items()}


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def redactor(secret: str | Iterable[str], replacement: str = REDACTED) -> Callable[[str], str]:
    """A function that scrubs ``secret`` (or each of several, see the module's doc) from any text; the identity for
    no secret."""
    secrets = [secret] if isinstance(secret, str) else list(secret)
    grams = _grams(form for one in secrets if one for form in secret_forms(one))
    if not grams:
        return lambda text: text

    def scrub_text(text: str) -> str:
        chars: list[_Char] = [(c, i, i + 1) for i, c in enumerate(text)]
        spans = _spans(chars, grams)
        for _ in range(MAX_UNESCAPE):
            unescaped = _unescape(chars)
            if len(unescaped) == len(chars):
                break
            chars = unescaped
            spans += _spans(chars, grams)
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
    """``exc`` with its message scrubbed of ``secret`` and of every registered secret, no longer chained to what it
    was raised from (a traceback would print the cause's text, which the scrubber has not seen)."""
    exc.args = tuple(scrub_known(scrub(a, secret, replacement)) if isinstance(a, str) else a for a in exc.args)
    exc.__cause__, exc.__suppress_context__ = None, True
    return exc


#: A registered secret shorter than this is not scrubbed from free text (it would cut ordinary words); a short
#: password in a URL is still removed with the URL's userinfo.
MIN_SECRET = 8
#: The most secrets kept registered (a token re-read on every query may rotate); the oldest are dropped first.
MAX_REGISTERED = 64

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#]*@")
_registered: dict[str, None] = {}
_known: Callable[[str], str] = lambda text: text  # noqa: E731 - rebuilt on every registration


def strip_userinfo(text: str) -> str:
    """``text`` with every URL's ``user:password@`` removed (``https://u:p@host/x`` -> ``https://host/x``)."""
    return _USERINFO.sub(r"\1", text)


def url_secrets(url: str) -> tuple[str, ...]:
    """The secrets a URL carries in its userinfo: the password, and ``user:password`` (what Basic auth encodes)."""
    try:
        parts = urllib.parse.urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return ()
    if not password:
        return ()
    plain = urllib.parse.unquote(password)
    return tuple(dict.fromkeys((plain, password, f"{urllib.parse.unquote(user or '')}:{plain}")))


def register_secret(secret: str) -> None:
    """Scrub ``secret`` (in every form) from whatever :func:`scrub_known` sees from now on."""
    global _known
    secret = secret.strip()
    if len(secret) < MIN_SECRET or secret in _registered:
        return
    _registered[secret] = None
    while len(_registered) > MAX_REGISTERED:
        del _registered[next(iter(_registered))]
    _known = redactor(tuple(_registered))


def forget_secrets() -> None:
    """Unregister every secret (a process that reads new settings, and tests)."""
    global _known
    _registered.clear()
    _known = redactor(())


def scrub_known(text: str) -> str:
    """``text`` without any registered secret (in any form) and without any URL's userinfo."""
    return _known(strip_userinfo(text))


__all__ = [
    "MAX_REGISTERED",
    "MAX_UNESCAPE",
    "MIN_FRAGMENT",
    "MIN_SECRET",
    "REDACTED",
    "forget_secrets",
    "fragment_length",
    "redactor",
    "register_secret",
    "scrub",
    "scrub_known",
    "scrubbed_error",
    "secret_forms",
    "strip_userinfo",
    "url_secrets",
]
