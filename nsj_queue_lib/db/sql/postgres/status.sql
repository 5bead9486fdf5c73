-- Named queries of `python -m nsj_queue_lib.status` (PostgreSQL).  Same names as the
-- MySQL file; ages are computed by the database clock.
-- Blocks whose text is the same in every dialect live in sql/common/status.sql.

-- name: status_lock_holders
-- Task id (mod 2**32) -> start of the transaction of the session holding its advisory lock.
-- DB_POOL_MODE=transaction: the lease's owner instead (no start time: estimated), read
-- through the row's JSON so that a queue before schema 7 needs no statement of its own.
SELECT l.objid::int8 AS objid, a.xact_start AS inicio,
       extract(epoch FROM (now() - a.xact_start)) AS segundos,
       a.application_name || coalesce('@' || host(a.client_addr), '') AS sessao
  FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = %(ns)s
UNION ALL
SELECT t.id & 4294967295, NULL, NULL,
       'concessão de ' || (to_jsonb(t) ->> 'lease_dono') || ' até '
         || to_char((to_jsonb(t) ->> 'lease_ate')::timestamptz, 'HH24:MI:SS')
  FROM {table} t
 WHERE t.status = 'processando' AND to_jsonb(t) ->> 'lease_ate' IS NOT NULL
