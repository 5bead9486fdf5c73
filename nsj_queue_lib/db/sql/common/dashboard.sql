-- Named queries of the web dashboard (nsj_queue_lib.dashboard) whose text is the same
-- in every dialect; the loader adds them to each dialect's dashboard.sql.
-- Dialect words ({now}, {returning_id}, the casts a PostgreSQL parameter needs, ...)
-- are filled in by the loader: DIALECT_WORDS in nsj_queue_lib/db/dialect.py.

-- name: dash_dead_letters
-- Dead-letter chains whose last attempt did not succeed and whose live chain was not
-- redriven since (its current attempt is still 'falha'), newest first (index on live_id).
SELECT coalesce(t.id_inicial, t.id) AS id, t.id AS ultimo_id, t.live_id, t.processo,
       t.status, t.tentativa, t.data_hora_inicial, t.data_hora, t.mensagem
  FROM {table} t
 WHERE t.live_id IS NOT NULL AND t.dead AND NOT t.reenfileirado AND t.status <> 'sucesso'
   AND NOT EXISTS (SELECT 1 FROM {table} l
                    WHERE (l.id = t.live_id OR l.id_inicial = t.live_id)
                      AND NOT l.reenfileirado AND l.status <> 'falha')
 ORDER BY t.id DESC
 LIMIT %(limit)s

-- name: dash_dead_count
SELECT count(*) FROM (SELECT 1 FROM {table} t
 WHERE t.live_id IS NOT NULL AND t.dead AND NOT t.reenfileirado AND t.status <> 'sucesso'
   AND NOT EXISTS (SELECT 1 FROM {table} l
                    WHERE (l.id = t.live_id OR l.id_inicial = t.live_id)
                      AND NOT l.reenfileirado AND l.status <> 'falha')
 LIMIT %(cap)s) s

-- name: dash_live_last_error
-- The error of the live chain's last attempt (the one that sent it to the dead letters).
SELECT t.id, t.status, t.mensagem
  FROM {table} t
 WHERE (t.id = %(root)s OR t.id_inicial = %(root)s) AND NOT t.reenfileirado
 ORDER BY t.id DESC
 LIMIT 1

-- name: dash_active_counts
-- Waiting and running tasks per status (partial indexes), each count capped at %(cap)s.
SELECT 'pendente' AS status, count(*) AS n
  FROM (SELECT 1 FROM {table} WHERE status = 'pendente' LIMIT %(cap)s) s
UNION ALL
SELECT 'agendada', count(*)
  FROM (SELECT 1 FROM {table} WHERE status = 'agendada' LIMIT %(cap)s) s
UNION ALL
SELECT 'processando', count(*)
  FROM (SELECT 1 FROM {table} WHERE status = 'processando' LIMIT %(cap)s) s
UNION ALL
SELECT 'devidas', count(*)
  FROM (SELECT 1 FROM {table} WHERE status IN ('pendente', 'agendada') AND data_hora <= {now}
         LIMIT %(cap)s) s

-- name: dash_now
SELECT {now} AS agora

-- name: dash_queues
-- Tables that have the columns of a queue, in every schema the user can see (but the
-- server's own: {system_schemas}).
SELECT c.table_schema AS esquema, c.table_name AS tabela
  FROM information_schema.columns c
  JOIN information_schema.tables t
    ON t.table_schema = c.table_schema AND t.table_name = c.table_name
 WHERE t.table_type = 'BASE TABLE'
   AND c.table_schema NOT IN ({system_schemas})
   AND c.column_name IN ('id_inicial', 'reenfileirado', 'live_id', 'dead', 'tentativa',
                         'data_hora', 'status', 'prioridade')
 GROUP BY c.table_schema, c.table_name
HAVING count(DISTINCT c.column_name) = 8
 ORDER BY 1, 2
