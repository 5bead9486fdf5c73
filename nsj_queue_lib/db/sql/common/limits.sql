-- Concurrency limits (db/limits.py, nsj-queue limit): the operator's statements and the
-- limit-aware claim, used only while the queue has limits (the control row says so).
-- Same rules as queries.sql (named blocks, %(name)s parameters, DIALECT_WORDS).

-- name: limit_list
-- The limits, each with how many tasks of its processo are 'processando' now.
SELECT l.processo, l.maximo, l.alterado_por, l.alterado_em,
       (SELECT count(*) FROM {table} t
         WHERE t.status = 'processando' AND t.processo = l.processo) AS em_execucao
  FROM {limit_table} l
 ORDER BY l.processo

-- name: limit_all
-- The workers' read of the limits, once per limit-aware claim.
SELECT processo, maximo FROM {limit_table}

-- name: limit_delete
DELETE FROM {limit_table} WHERE processo = %(processo)s

-- name: limit_running
-- Tasks of a processo 'processando' now (nsj-queue limit set tells when above the limit).
SELECT count(*) FROM {table} WHERE status = 'processando' AND processo = %(processo)s

-- name: order_overview
-- Ordered execution for status, dashboard and metrics: keys with unfinished tasks (ix_ordem).
SELECT count(DISTINCT chave_ordem) AS chaves, count(*) AS tarefas
  FROM {table}
 WHERE chave_ordem IS NOT NULL AND status IN ('pendente', 'agendada', 'processando')

-- name: tenant_overview
-- QUEUE_FAIR_TENANTS, for status, dashboard and metrics: tenants with due tasks (NULL is one).
SELECT count(DISTINCT coalesce(tenant, -9223372036854775807)) AS tenants
  FROM {table}
 WHERE status IN ('pendente', 'agendada') AND data_hora <= {now}
