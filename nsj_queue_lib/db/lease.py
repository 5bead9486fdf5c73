"""The lease statements (sql/postgres/lease.sql) on one session, for DB_POOL_MODE=transaction.

A running task is owned through its row (lease_dono, lease_ate), an admin job through a
lease row of `<fila>_rotinas`, HALT through that table's row 'halt': nothing on a session,
so every statement may land on any server connection of a transaction pooler.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from nsj_queue_lib.db.names import admin_table_name
from nsj_queue_lib.db.queries import Queries
from nsj_queue_lib.db.repository import TaskRepository, _normalize
from nsj_queue_lib.db.session import DbSession
from nsj_queue_lib.exceptions import ConfigError

LEASE_SQL = "lease.sql"


class LeaseRepository:
    """Lease operations of one queue on one session (PostgreSQL)."""

    def __init__(self, repo: TaskRepository) -> None:
        self.repo = repo
        self.session: DbSession = repo.session
        self.queue_table = repo.queue_table
        self.q = Queries(repo.session.dialect, repo.queue_table, filename=LEASE_SQL)

    def claim(self, limit: int, dono: str, lease: float) -> List[dict]:
        """Up to `limit` due tasks, 'processando' under this owner's lease (autocommit)."""
        rows = self.session.fetch_all(self.q["lease_claim"],
                                      {"limit": limit, "dono": dono, "lease": lease})
        return [_normalize(r) for r in rows]

    def finish(self, task_id: int, mensagem: str, dono: str) -> bool:
        """The success mark in the caller's transaction; False when not this owner's."""
        params = {"id": task_id, "mensagem": self.repo._message(mensagem), "dono": dono}
        return self.session.execute(self.q["lease_finish"], params) == 1

    def extend(self, ids: Sequence[int], dono: str, lease: float) -> List[int]:
        """Heartbeat: the ids whose lease moved forward (still this owner's)."""
        rows = self.session.fetch_all(self.q["lease_extend"],
                                      {"ids": list(ids), "dono": dono, "lease": lease})
        return [int(r["id"]) for r in rows]

    def any_expired(self) -> bool:
        """Whether some running task's lease expired (autocommit, one statement)."""
        return bool(self.session.fetch_value(self.q["lease_any_expired"]))

    def expired(self) -> Optional[int]:
        """In the caller's transaction: one running task whose lease expired, row-locked."""
        return self.session.fetch_value(self.q["lease_expired"])

    def unclaim(self, task_id: int, dono: str) -> bool:
        return self.session.execute(self.q["lease_unclaim"], {"id": task_id, "dono": dono}) == 1

    def check_schema(self) -> None:
        """Refuse a queue without the lease columns (schema < 7), in Portuguese."""
        table = self.session.dialect.quote_table(self.queue_table)
        if not self.session.fetch_value(self.q["lease_columns"], {"table": table}):
            raise ConfigError(
                f"DB_POOL_MODE=transaction precisa das colunas de concessão (lease_dono, "
                f"lease_ate) na tabela {self.queue_table} (schema 7): atualize-a com "
                "`nsj-queue schema upgrade`")
        admin = self.session.dialect.quote_table(admin_table_name(self.queue_table))
        if not self.session.fetch_value(self.q["admin_table_exists"], {"table": admin}):
            raise ConfigError(
                f"DB_POOL_MODE=transaction precisa da tabela {admin_table_name(self.queue_table)} "
                "(travas das rotinas e HALT): crie-a com `nsj-queue schema upgrade`")

    # -- admin leases and HALT (<fila>_rotinas) ------------------------------------
    def admin_take(self, chave: str, dono: str, ttl: float) -> bool:
        return self.session.fetch_value(
            self.q["admin_lease_take"], {"chave": chave, "dono": dono, "ttl": ttl}) == 1

    def admin_drop(self, chave: str, dono: str) -> bool:
        return self.session.execute(self.q["admin_lease_drop"],
                                    {"chave": chave, "dono": dono}) == 1

    def halt_set(self, por: Optional[str]) -> None:
        self.session.execute(self.q["halt_set"], {"por": por})

    def probe(self) -> Tuple[bool, Any]:
        """(a task is due, the time of the last HALT request or None), in one statement."""
        row = self.session.fetch_one(self.q["lease_probe"]) or {}
        return bool(row.get("due")), row.get("halt")

    def halt_get(self) -> Any:
        return self.session.fetch_value(self.q["halt_get"])
