-- Named queries of `python -m nsj_queue_lib.status` and of the metrics whose text is
-- the same in every dialect; the loader adds them to each dialect's status.sql.

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
