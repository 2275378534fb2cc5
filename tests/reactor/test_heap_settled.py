"""The operator's start-up objects are left out of the collector's later passes, and what is made after them is
still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from controller.reactor.run import settle_heap


@pytest.fixture
def settled() -> Iterator[None]:
    try:
        settle_heap()
        yield
    finally:
        gc.unfreeze()  # the test process goes on


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_start_up_objects_are_frozen_and_later_garbage_still_collected(settled: None) -> None:
    assert gc.get_freeze_count() > 10_000  # the modules imported so far, their classes, ...
    # a full pass walks only what the collector still tracks: what came after, not the frozen start-up objects
    assert len(gc.get_objects()) < gc.get_freeze_count() / 10

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the collector frees it
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None
