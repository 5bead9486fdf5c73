-- Named queries of the web dashboard (nsj_queue_lib.dashboard), PostgreSQL.  Same names
-- and parameters as the MySQL file.  Each one reads an index range (or the catalog):
-- its cost depends on the backlog, the dead letters or the last hour, never on the table.
-- Blocks whose text is the same in every dialect live in sql/common/dashboard.sql.

-- name: dash_queues
-- Tables that have the columns of a queue, in every schema the user can see.
SELECT c.table_schema AS esquema, c.table_name AS tabela
  FROM information_schema.columns c
  JOIN information_schema.tables t
    ON t.table_schema = c.table_schema AND t.table_name = c.table_name
 WHERE t.table_type = 'BASE TABLE'
   AND c.table_schema NOT IN ('pg_catalog', 'information_schema')
   AND c.column_name IN ('id_inicial', 'reenfileirado', 'live_id', 'dead', 'tentativa',
                         'data_hora', 'status', 'prioridade')
 GROUP BY c.table_schema, c.table_name
HAVING count(DISTINCT c.column_name) = 8
 ORDER BY 1, 2

-- name: dash_last_hour
-- Attempts finished whose data_hora is in the last hour, per minute ago and status (BRIN).
SELECT floor(extract(epoch FROM (now() - data_hora)) / 60)::int AS minuto, status,
       count(*) AS n
  FROM {table}
 WHERE data_hora > now() - interval '1 hour' AND data_hora <= now()
   AND status IN ('sucesso', 'falha', 'cancelada')
 GROUP BY 1, 2
