-- Named queries of `python -m nsj_queue_lib.status` (MySQL/MariaDB/SingleStore).  Same
-- names as the PostgreSQL file; columns hold UTC, so the clock is UTC_TIMESTAMP(6).
-- Blocks whose text is the same in every dialect live in sql/common/status.sql.

-- name: status_lock_holders
-- Locks live in the queue server, not in MySQL: no rows (running times are estimated).
SELECT NULL AS objid, NULL AS inicio, NULL AS segundos, NULL AS sessao
  FROM DUAL
 WHERE %(ns)s IS NULL
