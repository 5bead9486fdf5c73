-- Concurrency limits, MySQL/MariaDB (the rest is in sql/common/limits.sql).

-- name: limit_upsert
INSERT INTO {limit_table} (processo, maximo, alterado_por, alterado_em)
VALUES (%(processo)s, %(maximo)s, %(por)s, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
   maximo = VALUES(maximo), alterado_por = VALUES(alterado_por),
   alterado_em = VALUES(alterado_em)

-- name: limit_flag_set
-- Whether the queue has limits: the control table's row id = 4 (pausada = TRUE), read by
-- the workers with the pause flag (admin.sql queue_pause_get).
INSERT INTO {control_table} (id, pausada, motivo, alterado_em)
SELECT 4, EXISTS (SELECT 1 FROM {limit_table}), 'limites', UTC_TIMESTAMP(6)
ON DUPLICATE KEY UPDATE pausada = VALUES(pausada), alterado_em = VALUES(alterado_em)

-- name: limit_pick
-- See sql/postgres/limits.sql, for one waiting status (%(status)s) at a time: one ordered
-- range of ix_claim, so that the locking read stops at its first row (with both statuses
-- the sort would read, and lock, every due row).  /*blocked*/ becomes nothing or the
-- repository's "AND (t.processo IS NULL OR t.processo NOT IN (...))".
SELECT {tarefa_json}
  FROM {table} t
 WHERE t.status = %(status)s AND t.data_hora <= UTC_TIMESTAMP(6) /*blocked*/
 ORDER BY t.prioridade DESC, t.data_hora, t.id
 LIMIT 1
   FOR UPDATE SKIP LOCKED

-- name: limit_mark
-- The picked row (locked by limit_pick) to 'processando' with its task's named lock, as
-- task_mark_processing_locked does.
UPDATE {table}
   SET status = 'processando'
 WHERE id = %(id)s AND status IN ('pendente', 'agendada')
   AND GET_LOCK(%(lock_name)s, 0) = 1

-- name: limit_mark_batch
-- Batch mode: no named lock (see task_mark_processing_batch).
UPDATE {table}
   SET status = 'processando'
 WHERE id = %(id)s AND status IN ('pendente', 'agendada')
