-- Named queries of the operator's commands (nsj_queue_lib.admin.QueueAdmin) and of the
-- workers' pause check (MySQL / MariaDB / SingleStore).  Same names and parameters as the
-- PostgreSQL file; times are DATETIME(6) in UTC; no literal percent sign may appear here.
-- A chain is a task's first attempt (its "root") and its retries (id_inicial = root);
-- its current state is its one attempt not re-queued (NOT reenfileirado).
-- Blocks whose text is the same in every dialect live in sql/common/admin.sql.

-- name: admin_task_list
-- Newest first.  %(all_attempts)s false: only the current attempt of each chain.
SELECT t.id, coalesce(t.id_inicial, t.id) AS id_inicial, t.tentativa, t.status, t.processo,
       t.origem, t.destino, t.chave_externa, t.tenant, t.grupo_empresarial, t.prioridade,
       t.data_hora_inicial, t.data_hora, t.mensagem, t.dead, t.live_id, t.pub_sub,
       t.publication_id, t.subscriber_id
  FROM {table} t
 WHERE (%(all_attempts)s OR NOT t.reenfileirado)
   AND (%(status)s IS NULL OR t.status = %(status)s)
   AND (%(processo)s IS NULL OR t.processo = %(processo)s)
   AND (%(chave_externa)s IS NULL OR t.chave_externa = %(chave_externa)s)
   AND (%(tenant)s IS NULL OR t.tenant = %(tenant)s)
   AND (%(dead)s IS NULL OR t.dead = %(dead)s)
   AND (%(before_id)s IS NULL OR t.id < %(before_id)s)
 ORDER BY t.id DESC
 LIMIT %(limit)s

-- name: admin_redrive_mark
-- Claims the right to redrive: only one caller turns reenfileirado on (the row lock
-- serialises concurrent calls; the loser re-reads the row and updates nothing).
UPDATE {table}
   SET reenfileirado = TRUE
 WHERE id = %(id)s AND NOT reenfileirado AND status IN ('falha', 'cancelada')

-- name: admin_redrive_insert
-- The new attempt of the chain, due now, linked to the attempt it follows.
INSERT INTO {table} (id_inicial, data_hora_inicial, data_hora, origem, destino, processo,
                     chave_externa, tentativa, status, mensagem, id_anterior,
                     data_hora_anterior, status_anterior, mensagem_anterior, tenant,
                     grupo_empresarial, payload_hash, pub_sub, publication_id, subscriber_id,
                     dead, live_id, prioridade)
SELECT coalesce(t.id_inicial, t.id), t.data_hora_inicial, UTC_TIMESTAMP(6), t.origem,
       t.destino, t.processo, t.chave_externa, t.tentativa + 1, 'pendente', %(mensagem)s,
       t.id, t.data_hora, t.status, t.mensagem, t.tenant, t.grupo_empresarial,
       t.payload_hash, t.pub_sub, t.publication_id, t.subscriber_id, t.dead, t.live_id,
       t.prioridade
  FROM {table} t
 WHERE t.id = %(id)s

-- name: queue_pause_set
INSERT INTO {control_table} (id, pausada, motivo, alterado_por, alterado_em)
VALUES (1, %(pausada)s, %(motivo)s, %(por)s, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
   pausada = VALUES(pausada), motivo = VALUES(motivo),
   alterado_por = VALUES(alterado_por), alterado_em = VALUES(alterado_em)

-- name: control_table_exists
-- A queue created before the control table (2.1) has none: never paused then.
SELECT count(*) > 0
  FROM information_schema.tables
 WHERE table_name = %(name)s
   AND table_schema = coalesce(%(schema)s, DATABASE())
