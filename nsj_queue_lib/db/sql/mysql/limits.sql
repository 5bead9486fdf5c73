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
-- repository's "AND (t.processo IS NULL OR t.processo NOT IN (...))"; /*ordered*/ nothing
-- or part_order_check (see limit_pick_ordered in sql/postgres/limits.sql).
SELECT {tarefa_json}
  FROM {table} t
 WHERE t.status = %(status)s AND t.data_hora <= UTC_TIMESTAMP(6) /*blocked*/ /*ordered*/
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

-- name: part_order_check
AND (t.chave_ordem IS NULL OR NOT EXISTS (
     SELECT 1 FROM {table} o
      WHERE o.chave_ordem = t.chave_ordem AND o.id <> t.id
        AND o.status IN ('pendente', 'agendada', 'processando')
        AND (o.status = 'processando'
             OR coalesce(o.id_inicial, o.id) < coalesce(t.id_inicial, t.id))))

-- name: order_state
SELECT FALSE AS misto, (SELECT alterado_em FROM {control_table} WHERE id = 5) AS desde

-- name: order_flag_set
-- The first ordered insert: the control table's row id = 5 (its time is alterado_em).
INSERT INTO {control_table} (id, pausada, motivo, alterado_em)
VALUES (5, TRUE, 'ordem', UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE id = id

-- name: task_insert_ordered
-- See sql/postgres/limits.sql.
INSERT INTO {table} (origem, destino, processo, chave_externa, payload, payload_hash,
                     tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial,
                     chave_ordem)
VALUES (%(origem)s, %(destino)s, %(processo)s, %(chave_externa)s, %(payload)s, %(payload_hash)s,
        %(tenant)s, %(grupo_empresarial)s, %(pub_sub)s, %(prioridade)s,
        GREATEST(coalesce(%(data_hora)s, UTC_TIMESTAMP(6)), %(settle)s),
        coalesce(%(data_hora)s, UTC_TIMESTAMP(6)), %(chave_ordem)s)

-- name: fair_tenant
-- QUEUE_FAIR_TENANTS: among the due tasks of the top priority, the tenant (NULL as the
-- smallest bigint) right after %(last)s, or the first one (wrapping round); the claim then
-- picks that tenant's oldest task.  Read without locks: the pick decides.
SELECT coalesce(
         (SELECT min(coalesce(c.tenant, -9223372036854775807)) FROM {table} c
           WHERE c.status IN ('pendente', 'agendada') AND c.data_hora <= UTC_TIMESTAMP(6)
             AND c.prioridade = p.topo
             AND coalesce(c.tenant, -9223372036854775807) > coalesce(%(last)s, -9223372036854775808)),
         (SELECT min(coalesce(c.tenant, -9223372036854775807)) FROM {table} c
           WHERE c.status IN ('pendente', 'agendada') AND c.data_hora <= UTC_TIMESTAMP(6)
             AND c.prioridade = p.topo)) AS tenant
  FROM (SELECT max(prioridade) AS topo FROM {table}
         WHERE status IN ('pendente', 'agendada') AND data_hora <= UTC_TIMESTAMP(6)) p
