-- Named queries of `python -m nsj_queue_lib.status` (PostgreSQL).  Same names as the
-- MySQL file; ages are computed by the database clock.
-- Blocks whose text is the same in every dialect live in sql/common/status.sql.

-- name: status_now
SELECT now() AS agora

-- name: status_oldest_due
SELECT id, processo, status, tentativa, data_hora,
       extract(epoch FROM (now() - data_hora)) AS atraso
  FROM {table}
 WHERE status IN ('pendente', 'agendada') AND data_hora <= now()
 ORDER BY data_hora, id
 LIMIT 1

-- name: status_due_count
SELECT count(*) FROM {table} WHERE status IN ('pendente', 'agendada') AND data_hora <= now()

-- name: status_dead_recent
SELECT coalesce(id_inicial, id) AS id, live_id, processo, subscriber_id, status, tentativa,
       data_hora_inicial, mensagem
  FROM {table}
 WHERE live_id IS NOT NULL AND dead AND NOT reenfileirado
   AND data_hora_inicial >= now() - %(hours)s * interval '1 hour'
 ORDER BY data_hora_inicial DESC, id DESC
 LIMIT %(limit)s

-- name: status_dead_counts
SELECT status, count(*) AS n
  FROM {table}
 WHERE live_id IS NOT NULL AND dead AND NOT reenfileirado
   AND data_hora_inicial >= now() - %(hours)s * interval '1 hour'
 GROUP BY status

-- name: status_running
SELECT id, processo, tentativa, data_hora, extract(epoch FROM (now() - data_hora)) AS idade
  FROM {table}
 WHERE status = 'processando'
 ORDER BY id
 LIMIT %(limit)s

-- name: status_lock_holders
-- Task id (mod 2**32) -> start of the transaction of the session holding its advisory lock.
SELECT l.objid::int8 AS objid, a.xact_start AS inicio,
       extract(epoch FROM (now() - a.xact_start)) AS segundos,
       a.application_name || coalesce('@' || host(a.client_addr), '') AS sessao
  FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = %(ns)s

-- name: metrics_oldest_due
-- The oldest due task: one short index range per status (ix_due), then the earlier of two.
SELECT id, processo, status, tentativa, data_hora,
       extract(epoch FROM (now() - data_hora)) AS atraso
  FROM ((SELECT id, processo, status, tentativa, data_hora FROM {table}
          WHERE status = 'pendente' AND data_hora <= now() ORDER BY data_hora, id LIMIT 1)
        UNION ALL
        (SELECT id, processo, status, tentativa, data_hora FROM {table}
          WHERE status = 'agendada' AND data_hora <= now() ORDER BY data_hora, id LIMIT 1)) s
 ORDER BY data_hora, id
 LIMIT 1
