from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_engine import FakeEngine


@pytest.fixture
def engine() -> Iterator[FakeEngine]:
    """A fake vLLM engine for the canary launchers to hand out."""
    with FakeEngine() as e:
        yield e
