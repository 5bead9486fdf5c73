"""The contract suite's fixture: `backend_harness`, the harness over `each_backend_queue`
(one queue per backend)."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.contract.harness import Harness


@pytest.fixture
def backend_harness(each_backend_queue) -> Iterator[Harness]:
    """The backend of `each_backend_queue` (PostgreSQL, MySQL native, socket server on
    PostgreSQL and on MariaDB) with the sessions and guards a test opens (closed before the
    queue goes)."""
    harness = Harness(each_backend_queue)
    yield harness
    harness.close()
