"""The contract suite's fixture: `h`, the harness over `lq` (one queue per backend)."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.contract.harness import Harness


@pytest.fixture
def h(lq) -> Iterator[Harness]:
    """The backend of `lq` (PostgreSQL, MySQL native, socket server on PostgreSQL and on
    MariaDB) with the sessions and guards a test opens (closed before the queue goes)."""
    harness = Harness(lq)
    yield harness
    harness.close()
