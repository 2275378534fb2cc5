"""Refused policies, remembered by what was refused, so a retry does not pay for the refusal again.

A TunedService whose policy is refused is retried every minute (``Accepted=False`` until it changes). Proving that
no config of a space satisfies its constraints walks the whole space: 100,000 legal combinations cost seconds of
CPU. The refusal is kept under the policy's source, the ConfigMap's resourceVersion and a hash of its text (or, for
a policy rebased on the running config, the policy and that config), so the next retry answers at once, and a
changed ConfigMap is judged afresh. Only refusals are kept; a bounded number, least recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

from controller.errors import InvalidInput

T = TypeVar("T")

#: Refusals kept (each is one exception and its key).
MAX_REFUSALS = 256


class PolicyRefusals:
    def __init__(self, *, max_entries: int = MAX_REFUSALS) -> None:
        self.max_entries = max_entries
        self._refused: OrderedDict[Hashable, InvalidInput] = OrderedDict()
        self._lock = threading.Lock()
        self.evaluated = 0
        """How many times a policy was judged (``build`` ran)."""
        self.remembered = 0
        """How many times a remembered refusal answered instead."""

    def judged(self, key: Hashable, build: Callable[[], T]) -> T:
        """``build()``, unless it was refused under ``key`` before: then the same refusal, without running it."""
        with self._lock:
            refused = self._refused.get(key)
            if refused is not None:
                self._refused.move_to_end(key)
                self.remembered += 1
        if refused is not None:
            raise refused.with_traceback(None)
        self.evaluated += 1
        try:
            return build()
        except InvalidInput as exc:
            with self._lock:
                self._refused[key] = exc
                while len(self._refused) > self.max_entries:
                    self._refused.popitem(last=False)
            raise

    def __len__(self) -> int:
        return len(self._refused)


#: The operator's: every backend in the process shares it.
POLICY_REFUSALS = PolicyRefusals()

__all__ = ["MAX_REFUSALS", "POLICY_REFUSALS", "PolicyRefusals"]
