-- Named queries of `python -m nsj_queue_lib.status` (MySQL/MariaDB/SingleStore).  Same
-- names as the PostgreSQL file; columns hold UTC, so the clock is UTC_TIMESTAMP(6).
-- Blocks whose text is the same in every dialect live in sql/common/status.sql.

-- name: status_now
SELECT UTC_TIMESTAMP(6) AS agora

-- name: status_oldest_due
SELECT id, processo, status, tentativa, data_hora,
       TIMESTAMPDIFF(MICROSECOND, data_hora, UTC_TIMESTAMP(6)) / 1000000 AS atraso
  FROM {table}
 WHERE status IN ('pendente', 'agendada') AND data_hora <= UTC_TIMESTAMP(6)
 ORDER BY data_hora, id
 LIMIT 1

-- name: status_due_count
SELECT count(*) FROM {table}
 WHERE status IN ('pendente', 'agendada') AND data_hora <= UTC_TIMESTAMP(6)

-- name: status_dead_recent
SELECT coalesce(id_inicial, id) AS id, live_id, processo, subscriber_id, status, tentativa,
       data_hora_inicial, mensagem
  FROM {table}
 WHERE live_id IS NOT NULL AND dead AND NOT reenfileirado
   AND data_hora_inicial >= UTC_TIMESTAMP(6) - INTERVAL %(hours)s HOUR
 ORDER BY data_hora_inicial DESC, id DESC
 LIMIT %(limit)s

-- name: status_dead_counts
SELECT status, count(*) AS n
  FROM {table}
 WHERE live_id IS NOT NULL AND dead AND NOT reenfileirado
   AND data_hora_inicial >= UTC_TIMESTAMP(6) - INTERVAL %(hours)s HOUR
 GROUP BY status

-- name: status_running
SELECT id, processo, tentativa, data_hora,
       TIMESTAMPDIFF(MICROSECOND, data_hora, UTC_TIMESTAMP(6)) / 1000000 AS idade
  FROM {table}
 WHERE status = 'processando'
 ORDER BY id
 LIMIT %(limit)s

-- name: status_lock_holders
-- Locks live in the queue server, not in MySQL: no rows (running times are estimated).
SELECT NULL AS objid, NULL AS inicio, NULL AS segundos, NULL AS sessao
  FROM DUAL
 WHERE %(ns)s IS NULL

-- name: metrics_oldest_due
-- The oldest due task: one short index range per status (ix_due), then the earlier of two.
SELECT id, processo, status, tentativa, data_hora,
       TIMESTAMPDIFF(MICROSECOND, data_hora, UTC_TIMESTAMP(6)) / 1000000 AS atraso
  FROM ((SELECT id, processo, status, tentativa, data_hora FROM {table}
          WHERE status = 'pendente' AND data_hora <= UTC_TIMESTAMP(6)
          ORDER BY data_hora, id LIMIT 1)
        UNION ALL
        (SELECT id, processo, status, tentativa, data_hora FROM {table}
          WHERE status = 'agendada' AND data_hora <= UTC_TIMESTAMP(6)
          ORDER BY data_hora, id LIMIT 1)) s
 ORDER BY data_hora, id
 LIMIT 1
