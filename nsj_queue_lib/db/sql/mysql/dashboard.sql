-- Named queries of the web dashboard (nsj_queue_lib.dashboard), MySQL/MariaDB.  Same names
-- and parameters as the PostgreSQL file; columns hold UTC (UTC_TIMESTAMP(6)).
-- Blocks whose text is the same in every dialect live in sql/common/dashboard.sql.

-- name: dash_last_hour
SELECT FLOOR(TIMESTAMPDIFF(SECOND, data_hora, UTC_TIMESTAMP(6)) / 60) AS minuto, status,
       count(*) AS n
  FROM {table}
 WHERE data_hora > UTC_TIMESTAMP(6) - INTERVAL 1 HOUR AND data_hora <= UTC_TIMESTAMP(6)
   AND status IN ('sucesso', 'falha', 'cancelada')
 GROUP BY 1, 2
