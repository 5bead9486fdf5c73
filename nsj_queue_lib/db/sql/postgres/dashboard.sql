-- Named queries of the web dashboard (nsj_queue_lib.dashboard), PostgreSQL.  Same names
-- and parameters as the MySQL file.  Each one reads an index range (or the catalog):
-- its cost depends on the backlog, the dead letters or the last hour, never on the table.
-- Blocks whose text is the same in every dialect live in sql/common/dashboard.sql.

-- name: dash_last_hour
-- Attempts finished whose data_hora is in the last hour, per minute ago and status (BRIN).
SELECT floor(extract(epoch FROM (now() - data_hora)) / 60)::int AS minuto, status,
       count(*) AS n
  FROM {table}
 WHERE data_hora > now() - interval '1 hour' AND data_hora <= now()
   AND status IN ('sucesso', 'falha', 'cancelada')
 GROUP BY 1, 2
