"""Lock table of the server, with PostgreSQL session advisory lock semantics.

* A lock belongs to one owner (the id of one client connection).
* It is re-entrant: the owner may take it again, and must release it as many
  times as it took it before others can have it.
* Only the owner releases it; releasing a lock not held returns False.
* ``release_all(owner)`` drops every lock of an owner (its connection ended).
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

from nsj_queue_lib.engine.base import LockKey

logger = logging.getLogger(__name__)

Owner = int


class LockLimitExceeded(ValueError):
    """The owner already holds the maximum number of distinct locks."""


class LockTable:
    """Thread-safe map key -> (owner, count), indexed by owner as well."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._holders: dict[LockKey, tuple[Owner, int]] = {}
        self._by_owner: dict[Owner, set[LockKey]] = {}

    def try_lock(self, owner: Owner, key: LockKey, limit: Optional[int] = None) -> bool:
        """Take (or re-take) `key` for `owner`; False when another owner holds it.

        Raises LockLimitExceeded when `owner` already holds `limit` distinct keys."""
        with self._mutex:
            current = self._holders.get(key)
            if current is None:
                if limit is not None and len(self._by_owner.get(owner, ())) >= limit:
                    raise LockLimitExceeded(f"limite de {limit} locks por conexão atingido")
                self._holders[key] = (owner, 1)
                self._by_owner.setdefault(owner, set()).add(key)
                return True
            holder, count = current
            if holder != owner:
                return False
            self._holders[key] = (owner, count + 1)
            return True

    def unlock(self, owner: Owner, key: LockKey) -> bool:
        """Release one hold of `key`; False when `owner` does not hold it."""
        with self._mutex:
            current = self._holders.get(key)
            if current is None or current[0] != owner:
                return False
            count = current[1] - 1
            if count > 0:
                self._holders[key] = (owner, count)
                return True
            del self._holders[key]
            keys = self._by_owner.get(owner)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_owner[owner]
            return True

    def release_all(self, owner: Owner) -> int:
        """Release every lock of `owner` (all its holds); return how many keys were freed."""
        with self._mutex:
            keys = self._by_owner.pop(owner, set())
            for key in keys:
                self._holders.pop(key, None)
            return len(keys)

    def holder(self, key: LockKey) -> Optional[Owner]:
        """Current owner of `key`, or None."""
        with self._mutex:
            current = self._holders.get(key)
            return current[0] if current else None

    def held_by(self, owner: Owner) -> dict[LockKey, int]:
        """Keys held by `owner`, with their hold counts."""
        with self._mutex:
            return {key: self._holders[key][1] for key in self._by_owner.get(owner, ())}

    def __len__(self) -> int:
        with self._mutex:
            return len(self._holders)

    def owners(self) -> int:
        """Number of owners holding at least one lock."""
        with self._mutex:
            return len(self._by_owner)
