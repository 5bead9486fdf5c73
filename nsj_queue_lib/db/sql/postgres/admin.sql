-- Named queries of the operator's commands (nsj_queue_lib.admin.QueueAdmin) and of the
-- workers' pause check (PostgreSQL).  Same names and parameters as the MySQL file.
-- {table} and {control_table} are identifiers rendered once; values are %(name)s parameters.
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
   AND (%(status)s::varchar IS NULL OR t.status = %(status)s::varchar)
   AND (%(processo)s::varchar IS NULL OR t.processo = %(processo)s::varchar)
   AND (%(chave_externa)s::varchar IS NULL OR t.chave_externa = %(chave_externa)s::varchar)
   AND (%(tenant)s::int8 IS NULL OR t.tenant = %(tenant)s::int8)
   AND (%(dead)s::boolean IS NULL OR t.dead = %(dead)s::boolean)
   AND (%(before_id)s::int8 IS NULL OR t.id < %(before_id)s::int8)
 ORDER BY t.id DESC
 LIMIT %(limit)s

-- name: admin_redrive_mark
-- Claims the right to redrive: only one caller turns reenfileirado on (the row lock
-- serialises concurrent calls; the loser re-reads the row and updates nothing).
UPDATE {table}
   SET reenfileirado = true
 WHERE id = %(id)s AND NOT reenfileirado AND status IN ('falha', 'cancelada')

-- name: admin_redrive_insert
-- The new attempt of the chain, due now, linked to the attempt it follows.
INSERT INTO {table} (id_inicial, data_hora_inicial, data_hora, origem, destino, processo,
                     chave_externa, tentativa, status, mensagem, id_anterior,
                     data_hora_anterior, status_anterior, mensagem_anterior, tenant,
                     grupo_empresarial, payload_hash, pub_sub, publication_id, subscriber_id,
                     dead, live_id, prioridade)
SELECT coalesce(t.id_inicial, t.id), t.data_hora_inicial, now(), t.origem, t.destino,
       t.processo, t.chave_externa, t.tentativa + 1, 'pendente', %(mensagem)s, t.id,
       t.data_hora, t.status, t.mensagem, t.tenant, t.grupo_empresarial, t.payload_hash,
       t.pub_sub, t.publication_id, t.subscriber_id, t.dead, t.live_id, t.prioridade
  FROM {table} t
 WHERE t.id = %(id)s
RETURNING id

-- name: queue_pause_set
INSERT INTO {control_table} (id, pausada, motivo, alterado_por, alterado_em)
VALUES (1, %(pausada)s, %(motivo)s, %(por)s, now())
ON CONFLICT (id) DO UPDATE
   SET pausada = EXCLUDED.pausada, motivo = EXCLUDED.motivo,
       alterado_por = EXCLUDED.alterado_por, alterado_em = EXCLUDED.alterado_em

-- name: control_table_exists
-- A queue created before the control table (2.1) has none: never paused then.
SELECT EXISTS (SELECT 1
                 FROM pg_catalog.pg_class c
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                WHERE c.relname = %(name)s
                  AND n.nspname = coalesce(%(schema)s, current_schema()))
