-- Named queries of `python -m nsj_queue_lib.status` and of the metrics whose text is
-- the same in every dialect; the loader adds them to each dialect's status.sql.
-- Dialect words ({now}, {returning_id}, the casts a PostgreSQL parameter needs, ...)
-- are filled in by the loader: DIALECT_WORDS in nsj_queue_lib/db/dialect.py.

-- name: status_counts
SELECT status, count(*) AS n FROM {table} GROUP BY status

-- name: status_counts_chains
-- A failed attempt that was re-queued has a successor: the other rows are chain states.
SELECT status, count(*) AS n FROM {table} WHERE NOT reenfileirado AND NOT dead GROUP BY status

-- name: status_counts_dead_chains
SELECT status, count(*) AS n FROM {table} WHERE NOT reenfileirado AND dead GROUP BY status

-- name: status_running_count
SELECT count(*) FROM {table} WHERE status = 'processando'

-- name: metrics_depth
-- Metrics: tasks waiting or running, per status. Index ranges only (on status;
-- partial indexes in PostgreSQL): cost grows with the backlog, not the table.
SELECT status, count(*) AS n FROM {table} WHERE status IN ('pendente', 'agendada')
 GROUP BY status
UNION ALL
SELECT 'processando', count(*) FROM {table} WHERE status = 'processando'

-- name: metrics_dead_waiting
-- Metrics: dead-letter chains not resolved (last attempt not 'sucesso', live chain not
-- redriven) (index on live_id, partial in PostgreSQL).
SELECT count(*) FROM {table} t
 WHERE t.live_id IS NOT NULL AND t.dead AND NOT t.reenfileirado AND t.status <> 'sucesso'
   AND NOT EXISTS (SELECT 1 FROM {table} l
                    WHERE (l.id = t.live_id OR l.id_inicial = t.live_id)
                      AND NOT l.reenfileirado AND l.status <> 'falha')

-- name: status_now
SELECT {now} AS agora

-- name: status_oldest_due
SELECT id, processo, status, tentativa, data_hora,
       {seconds_since_data_hora} AS atraso
  FROM {table}
 WHERE status IN ('pendente', 'agendada') AND data_hora <= {now}
 ORDER BY data_hora, id
 LIMIT 1

-- name: status_due_count
SELECT count(*) FROM {table} WHERE status IN ('pendente', 'agendada') AND data_hora <= {now}

-- name: status_dead_recent
SELECT coalesce(id_inicial, id) AS id, live_id, processo, subscriber_id, status, tentativa,
       data_hora_inicial, mensagem
  FROM {table}
 WHERE live_id IS NOT NULL AND dead AND NOT reenfileirado
   AND data_hora_inicial >= {hours_ago}
 ORDER BY data_hora_inicial DESC, id DESC
 LIMIT %(limit)s

-- name: status_dead_counts
SELECT status, count(*) AS n
  FROM {table}
 WHERE live_id IS NOT NULL AND dead AND NOT reenfileirado
   AND data_hora_inicial >= {hours_ago}
 GROUP BY status

-- name: status_running
SELECT id, processo, tentativa, data_hora, {seconds_since_data_hora} AS idade
  FROM {table}
 WHERE status = 'processando'
 ORDER BY id
 LIMIT %(limit)s

-- name: metrics_oldest_due
-- The oldest due task: one short index range per status (ix_due), then the earlier of two.
SELECT id, processo, status, tentativa, data_hora,
       {seconds_since_data_hora} AS atraso
  FROM ((SELECT id, processo, status, tentativa, data_hora FROM {table}
          WHERE status = 'pendente' AND data_hora <= {now} ORDER BY data_hora, id LIMIT 1)
        UNION ALL
        (SELECT id, processo, status, tentativa, data_hora FROM {table}
          WHERE status = 'agendada' AND data_hora <= {now} ORDER BY data_hora, id LIMIT 1)) s
 ORDER BY data_hora, id
 LIMIT 1
