"""Claiming the next due task: highest `prioridade` first, then oldest `data_hora`.

Both strategies read at most a handful of index entries, whatever the backlog.
"""

from __future__ import annotations

from typing import Optional

from nsj_queue_lib.coordination.base import Locker, task_lock_key
from nsj_queue_lib.db.repository import TaskRepository

CANDIDATES = 8


class SqlLockClaimer:
    """PostgreSQL: one statement picks the row (SKIP LOCKED), takes its advisory lock on
    this session and marks it 'processando'."""

    def __init__(self, repo: TaskRepository, queue_table: str) -> None:
        self.repo = repo
        self.lock_ns = task_lock_key(queue_table, 0)[0]

    def claim(self) -> Optional[dict]:
        return self.repo.task_claim_locked(self.lock_ns)


class LockerClaimer:
    """Any database with an external Locker: read a few candidate ids, lock one through
    the Locker, then move it to 'processando' only if it is still waiting."""

    def __init__(self, repo: TaskRepository, locker: Locker, queue_table: str) -> None:
        self.repo = repo
        self.locker = locker
        self.queue_table = queue_table

    def claim(self) -> Optional[dict]:
        for task_id in self.repo.task_claim_candidates(CANDIDATES):
            key = task_lock_key(self.queue_table, task_id)
            if not self.locker.try_lock(key):
                continue
            tarefa = self.repo.task_mark_processing(task_id)
            if tarefa is not None:
                return tarefa
            self.locker.unlock(key)  # another worker finished it meanwhile
        return None
