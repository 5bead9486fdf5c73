-- Named queries of the web dashboard (nsj_queue_lib.dashboard), MySQL/MariaDB.  Same names
-- and parameters as the PostgreSQL file; columns hold UTC (UTC_TIMESTAMP(6)).
-- Blocks whose text is the same in every dialect live in sql/common/dashboard.sql.

-- name: dash_queues
SELECT c.table_schema AS esquema, c.table_name AS tabela
  FROM information_schema.columns c
  JOIN information_schema.tables t
    ON t.table_schema = c.table_schema AND t.table_name = c.table_name
 WHERE t.table_type = 'BASE TABLE'
   AND c.table_schema NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
   AND c.column_name IN ('id_inicial', 'reenfileirado', 'live_id', 'dead', 'tentativa',
                         'data_hora', 'status', 'prioridade')
 GROUP BY c.table_schema, c.table_name
HAVING count(DISTINCT c.column_name) = 8
 ORDER BY 1, 2

-- name: dash_last_hour
SELECT FLOOR(TIMESTAMPDIFF(SECOND, data_hora, UTC_TIMESTAMP(6)) / 60) AS minuto, status,
       count(*) AS n
  FROM {table}
 WHERE data_hora > UTC_TIMESTAMP(6) - INTERVAL 1 HOUR AND data_hora <= UTC_TIMESTAMP(6)
   AND status IN ('sucesso', 'falha', 'cancelada')
 GROUP BY 1, 2
