"""Refused policies, remembered by what was refused, so a retry does not pay for the refusal again.

A TunedService whose policy is refused is retried every minute (``Accepted=False`` until it changes). Refusing can
cost CPU: proving that no config of a space satisfies its constraints walks the whole space (100,000 legal
combinations cost seconds). So a refusal is kept under what was judged: for a tenant's ConfigMap, its source
(``configmap ns/name:key``) and the SHA-256 of its text, so a change that leaves the text as it was (an
annotation, a label: a new resourceVersion) is answered at once, and a changed text is judged afresh; for a policy
rebased on the running config, the policy and that config.

Refusals are kept per namespace, at most :data:`MAX_REFUSALS_PER_NAMESPACE` each (least recently used first out),
so one tenant's many cheap refusals cannot push out another tenant's costly one; at most :data:`MAX_REFUSALS` in
all, the namespace holding the most giving way first. Only refusals are kept, each as its message, source and
field (never the text, nor the traceback that would hold it).

A refusal also outlives the process: the operator records it in the TunedService's ``Accepted`` condition, whose
message ends with :func:`refusal_mark` (the source and the text's SHA-256). After a restart, :meth:`judged` is
given that stored refusal (``persisted``) and answers with it when the text still has that hash, without judging
the text again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

from controller.errors import InvalidInput

T = TypeVar("T")

#: Refusals kept in each namespace.
MAX_REFUSALS_PER_NAMESPACE = 64
#: Refusals kept in all (each is a message of at most :data:`MAX_MESSAGE_CHARS` characters and its key).
MAX_REFUSALS = 4096
#: The longest refusal message kept (and recorded in status): the first problems of a long list.
MAX_MESSAGE_CHARS = 8192


def refusal(message: str, *, source: str = "", field: str = "") -> InvalidInput:
    """A refusal whose message is ``message`` as it was first given (``source`` and ``field`` are kept beside it,
    not put in front of it again): what is remembered, and what answers from memory or from status."""
    refused = InvalidInput(message)
    refused.source, refused.field = source, field
    return refused


def refusal_mark(source: str, digest: str) -> str:
    """The last line of a ConfigMap policy's refusal message: what was refused, so the refusal can be recognised
    in the TunedService's status after a restart."""
    return f"(refused policy text: {source} sha256:{digest})"


def with_mark(exc: InvalidInput, source: str, digest: str) -> InvalidInput:
    """``exc``'s refusal, its message clipped to :data:`MAX_MESSAGE_CHARS` and ending with :func:`refusal_mark`."""
    message = str(exc)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS].rsplit("\n", 1)[0] + "\n(more problems left out)"
    return refusal(f"{message}\n{refusal_mark(source, digest)}", source=exc.source, field=exc.field)


def persisted_refusal(conditions: object, source: str, digest: str) -> InvalidInput | None:
    """The refusal of the text ``source`` with SHA-256 ``digest`` recorded in a stored status's conditions (the
    wire list of ``status.conditions``): an ``Accepted=False``, ``InvalidPolicy`` condition whose message ends with
    that text's :func:`refusal_mark`. None when the stored status records no refusal of this very text."""
    mark = refusal_mark(source, digest)
    for condition in conditions if isinstance(conditions, list) else []:
        if not isinstance(condition, dict) or condition.get("type") != "Accepted":
            continue
        message = condition.get("message")
        if (
            condition.get("status") == "False"
            and condition.get("reason") == "InvalidPolicy"
            and isinstance(message, str)
            and message.endswith(mark)
        ):
            return refusal(message, source=source)
    return None


class PolicyRefusals:
    def __init__(self, *, max_per_namespace: int = MAX_REFUSALS_PER_NAMESPACE, max_entries: int = MAX_REFUSALS) -> None:
        self.max_per_namespace = max_per_namespace
        self.max_entries = max_entries
        self._refused: dict[str, OrderedDict[Hashable, InvalidInput]] = {}
        self._lock = threading.Lock()
        self.evaluated = 0
        """How many times a policy was judged (``build`` ran)."""
        self.remembered = 0
        """How many times a remembered refusal answered instead (from memory or from a persisted one)."""
        self.restored = 0
        """How many of those came from a persisted refusal (the TunedService's status), not from memory."""

    def judged(
        self,
        key: Hashable,
        build: Callable[[], T],
        *,
        namespace: str = "",
        persisted: InvalidInput | None = None,
    ) -> T:
        """``build()``, unless it was refused under ``key`` in ``namespace`` before, or ``persisted`` is its
        refusal recorded before a restart: then that refusal, without running ``build``."""
        with self._lock:
            bucket = self._refused.get(namespace)
            refused = bucket.get(key) if bucket is not None else None
            if refused is not None and bucket is not None:
                bucket.move_to_end(key)
            elif persisted is not None:
                refused = persisted
                self._keep(namespace, key, persisted)
                self.restored += 1
            if refused is not None:
                self.remembered += 1
        if refused is not None:
            raise refusal(str(refused), source=refused.source, field=refused.field)
        with self._lock:
            self.evaluated += 1
        try:
            return build()
        except InvalidInput as exc:
            with self._lock:
                self._keep(namespace, key, refusal(str(exc), source=exc.source, field=exc.field))
            raise

    def _keep(self, namespace: str, key: Hashable, refused: InvalidInput) -> None:
        bucket = self._refused.setdefault(namespace, OrderedDict())
        bucket[key] = refused
        bucket.move_to_end(key)
        while len(bucket) > self.max_per_namespace:
            bucket.popitem(last=False)
        while len(self) > self.max_entries:  # the namespace holding the most gives way
            fullest = max(self._refused, key=lambda ns: len(self._refused[ns]))
            self._refused[fullest].popitem(last=False)
            if not self._refused[fullest]:
                del self._refused[fullest]

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._refused.values())

    def kept(self, namespace: str) -> list[InvalidInput]:
        """The refusals kept for ``namespace``, oldest first (a copy)."""
        with self._lock:
            bucket = self._refused.get(namespace)
            return list(bucket.values()) if bucket is not None else []

    def held(self, namespace: str) -> int:
        """Refusals kept for ``namespace``."""
        bucket = self._refused.get(namespace)
        return len(bucket) if bucket is not None else 0


#: The operator's: every backend in the process shares it.
POLICY_REFUSALS = PolicyRefusals()

__all__ = [
    "MAX_MESSAGE_CHARS",
    "MAX_REFUSALS",
    "MAX_REFUSALS_PER_NAMESPACE",
    "POLICY_REFUSALS",
    "PolicyRefusals",
    "persisted_refusal",
    "refusal",
    "refusal_mark",
    "with_mark",
]
