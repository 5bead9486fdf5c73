-- Named queries of the operator's commands (nsj_queue_lib.admin.QueueAdmin) whose text
-- is the same in every dialect; the loader adds them to each dialect's admin.sql.
-- {table} and {control_table} are identifiers rendered once; values are %(name)s
-- parameters; no literal percent sign (pymysql would read it as a placeholder).
-- Dialect words ({now}, {returning_id}, the casts a PostgreSQL parameter needs, ...)
-- are filled in by the loader: DIALECT_WORDS in nsj_queue_lib/db/dialect.py.

-- name: admin_task_root
SELECT t.id, coalesce(t.id_inicial, t.id) AS raiz, t.dead, t.live_id, t.pub_sub
  FROM {table} t
 WHERE t.id = %(id)s

-- name: admin_chain_attempts
-- Every attempt of a chain, in order; the payload lives in the first attempt only.
SELECT t.id, t.id_inicial, t.tentativa, t.status, t.data_hora_inicial, t.data_hora,
       t.proxima_tentativa, t.origem, t.destino, t.processo, t.chave_externa, t.mensagem,
       t.id_anterior, t.data_hora_anterior, t.status_anterior, t.mensagem_anterior,
       t.reenfileirado, t.estouro_tentativas, t.tenant, t.grupo_empresarial, t.payload,
       t.payload_hash, t.pub_sub, t.publication_id, t.subscriber_id, t.dead, t.live_id,
       t.prioridade, t.chave_unica
  FROM {table} t
 WHERE t.id = %(root)s OR t.id_inicial = %(root)s
 ORDER BY t.tentativa, t.id

-- name: admin_dead_chains
-- Dead-letter chains created from a live chain (their first attempts).
SELECT t.id FROM {table} t
 WHERE t.live_id = %(root)s AND t.dead AND t.id_inicial IS NULL
 ORDER BY t.id

-- name: admin_subscriber_chains
-- Current state of the subscriber tasks a publication fanned out into.
SELECT coalesce(t.id_inicial, t.id) AS id, t.subscriber_id, t.status, t.tentativa
  FROM {table} t
 WHERE t.publication_id = %(root)s AND NOT t.dead AND NOT t.reenfileirado
 ORDER BY 1

-- name: admin_last_attempt
SELECT t.id, t.tentativa, t.status, t.dead, t.live_id
  FROM {table} t
 WHERE (t.id = %(root)s OR t.id_inicial = %(root)s) AND NOT t.reenfileirado
 ORDER BY t.id DESC
 LIMIT 1

-- name: admin_cancel
-- Only a waiting attempt: a running one belongs to its worker (it holds the row).
UPDATE {table}
   SET status = 'cancelada', mensagem = %(mensagem)s
 WHERE id = %(id)s AND status IN ('pendente', 'agendada')

-- name: admin_task_list
-- Newest first.  %(all_attempts)s false: only the current attempt of each chain.
-- %(failing)s true: only attempts waiting to run again after a failure (retries).
-- %(after_id)s: only ids above it (a bounded range of the primary key, newest first).
SELECT t.id, coalesce(t.id_inicial, t.id) AS id_inicial, t.tentativa, t.status, t.processo,
       t.origem, t.destino, t.chave_externa, t.tenant, t.grupo_empresarial, t.prioridade,
       t.data_hora_inicial, t.data_hora, t.mensagem, t.mensagem_anterior, t.dead, t.live_id,
       t.pub_sub, t.publication_id, t.subscriber_id, t.chave_unica
  FROM {table} t
 WHERE (%(all_attempts)s OR NOT t.reenfileirado)
   AND (%(after_id)s{as_int8} IS NULL OR t.id > %(after_id)s{as_int8})
   AND (%(status)s{as_varchar} IS NULL OR t.status = %(status)s{as_varchar})
   AND (%(processo)s{as_varchar} IS NULL OR t.processo = %(processo)s{as_varchar})
   AND (%(chave_externa)s{as_varchar} IS NULL OR t.chave_externa = %(chave_externa)s{as_varchar})
   AND (%(tenant)s{as_int8} IS NULL OR t.tenant = %(tenant)s{as_int8})
   AND (%(dead)s{as_boolean} IS NULL OR t.dead = %(dead)s{as_boolean})
   AND (%(failing)s{as_boolean} IS NULL
        OR (t.status IN ('pendente', 'agendada')
            AND coalesce(t.status_anterior, '') IN ('falha', 'falha_processando'))
           = %(failing)s{as_boolean})
   AND (%(before_id)s{as_int8} IS NULL OR t.id < %(before_id)s{as_int8})
 ORDER BY t.id DESC
 LIMIT %(limit)s

-- name: admin_run_now
-- A retry waiting for its time (an 'agendada' attempt that follows a failed one) is due
-- now; the row lock serialises it with a worker's promotion or claim.
UPDATE {table}
   SET data_hora = {now}, mensagem = %(mensagem)s
 WHERE id = %(id)s AND status = 'agendada' AND id_anterior IS NOT NULL

-- name: admin_max_id
SELECT max(id) AS id FROM {table}

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
SELECT coalesce(t.id_inicial, t.id), t.data_hora_inicial, {now}, t.origem, t.destino,
       t.processo, t.chave_externa, t.tentativa + 1, 'pendente', %(mensagem)s, t.id,
       t.data_hora, t.status, t.mensagem, t.tenant, t.grupo_empresarial, t.payload_hash,
       t.pub_sub, t.publication_id, t.subscriber_id, t.dead, t.live_id, t.prioridade
  FROM {table} t
 WHERE t.id = %(id)s
{returning_id}
