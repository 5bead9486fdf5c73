-- Named queries whose text is the same in every dialect (PostgreSQL, MySQL/MariaDB,
-- SingleStore). The loader adds them to each dialect's queries.sql; a name may be
-- defined in only one of the two places. Same rules: {table}, {sub_table} and
-- {tarefa_cols} are identifiers rendered once; values are %(name)s parameters;
-- no literal percent sign (pymysql would read it as a placeholder).
-- Dialect words ({now}, {returning_id}, the casts a PostgreSQL parameter needs, ...)
-- are filled in by the loader: DIALECT_WORDS in nsj_queue_lib/db/dialect.py.

-- name: task_lock_row
-- Client/server mode fencing: holds the row while the task transaction runs.
SELECT id FROM {table} WHERE id = %(id)s AND status = 'processando' FOR UPDATE

-- name: task_try_lock_row
-- Rescue: the row of a 'processando' task, unless a running task transaction holds it
-- (its worker lost the socket lock but still runs it): then no row, at once, no wait.
SELECT id FROM {table} WHERE id = %(id)s AND status = 'processando' FOR UPDATE SKIP LOCKED

-- name: task_get
SELECT {tarefa_cols} FROM {table} t WHERE t.id = %(id)s

-- name: task_finish
UPDATE {table}
   SET status = 'sucesso', mensagem = %(mensagem)s
 WHERE id = %(id)s AND status = 'processando'

-- name: task_unclaim
-- A task claimed ahead (with the previous task's success: MySQL native, client/server) but
-- not run, because the worker stops: back to waiting, as if never claimed.
UPDATE {table}
   SET status = 'pendente'
 WHERE id = %(id)s AND status = 'processando'

-- name: task_list_running
SELECT id FROM {table}
 WHERE status = 'processando' AND id > %(after_id)s
 ORDER BY id
 LIMIT %(limit)s

-- name: subscriber_fanout
-- One statement: a task per active subscriber of the publication's processo
-- (a subscriber with NULL tenant/grupo_empresarial receives all; a publication with
-- NULL tenant/grupo_empresarial reaches only subscribers with NULL there), keeping
-- the publication's payload and prioridade; publication_id is the id returned by
-- insert_task_pub_sub (the first attempt's id, also when a retry fans out).
-- On PostgreSQL also made as subscriber_fanout_compat, the payload in 1.2.2's envelope
-- (part_fanout_payload_compat in sql/postgres; db/queries.py, VARIANT).
INSERT INTO {table} (origem, destino, processo, chave_externa, tentativa, status, payload,
                     payload_hash, tenant, grupo_empresarial, publication_id, subscriber_id,
                     prioridade)
SELECT p.origem, p.destino, p.processo, p.chave_externa, 1, 'pendente',
       {part_fanout_payload}, p.payload_hash, p.tenant, p.grupo_empresarial,
       coalesce(p.id_inicial, p.id), s.id, p.prioridade
{part_fanout_source}

-- name: subscriber_get
SELECT id, tenant, grupo_empresarial, processo, url, http_method, headers, ativo, created_at
  FROM {sub_table}
 WHERE id = %(id)s

-- name: task_insert_next_attempt
INSERT INTO {table} (id_inicial, data_hora_inicial, data_hora, origem, destino, processo,
                     chave_externa, tentativa, status, id_anterior, data_hora_anterior,
                     status_anterior, mensagem_anterior, tenant, grupo_empresarial, payload_hash,
                     pub_sub, publication_id, subscriber_id, dead, live_id, prioridade,
                     chave_unica, chave_ordem)
SELECT coalesce(t.id_inicial, t.id), t.data_hora_inicial, t.proxima_tentativa, t.origem,
       t.destino, t.processo, t.chave_externa, t.tentativa + 1, 'agendada', t.id, t.data_hora,
       t.status, t.mensagem, t.tenant, t.grupo_empresarial, t.payload_hash,
       t.pub_sub, t.publication_id, t.subscriber_id, t.dead, t.live_id, t.prioridade,
       t.chave_unica, t.chave_ordem
  FROM {table} t
 WHERE t.id = %(id)s
{returning_id}

-- name: task_insert_dead
-- (without chave_unica nor chave_ordem: a dead letter is the end of the keyed task, it
-- frees both keys)
INSERT INTO {table} (origem, destino, processo, chave_externa, tentativa, status, payload,
                     payload_hash, tenant, grupo_empresarial, pub_sub, publication_id,
                     subscriber_id, dead, live_id, prioridade)
SELECT t.origem, t.destino, t.processo, t.chave_externa, 1, 'pendente',
       coalesce(t.payload, i.payload), t.payload_hash, t.tenant, t.grupo_empresarial,
       t.pub_sub, t.publication_id, t.subscriber_id, true, coalesce(t.id_inicial, t.id),
       t.prioridade
  FROM {table} t
  LEFT JOIN {table} i ON i.id = t.id_inicial
 WHERE t.id = %(id)s
{returning_id}

-- name: task_has_due
-- The idle probe: one min() per waiting status, each the first entry of ix_due, so its cost
-- does not grow with the backlog (an EXISTS over both statuses let MySQL pick ix_claim and
-- step over every waiting row not yet due of a higher priority).
SELECT coalesce((SELECT min(data_hora) FROM {table} WHERE status = 'pendente') <= {now}, FALSE)
    OR coalesce((SELECT min(data_hora) FROM {table} WHERE status = 'agendada') <= {now}, FALSE)

-- name: admin_slot_get
-- The slot (UTC minute) an admin job last ran for (runtime/maintenance.py), read under
-- the job's admin lock.
SELECT horario FROM {admin_table} WHERE rotina = %(rotina)s

-- name: admin_slot_update
UPDATE {admin_table} SET horario = %(horario)s, executado_em = {now}, executado_por = %(por)s
 WHERE rotina = %(rotina)s

-- name: admin_slot_insert
INSERT INTO {admin_table} (rotina, horario, executado_em, executado_por)
VALUES (%(rotina)s, %(horario)s, {now}, %(por)s)

-- name: task_fail
-- The failure of a running attempt; with %(requeue)s its next attempt is due in %(delay)s
-- seconds ({delay_from_now}: PostgreSQL's clock_timestamp(), the time of the failure).
UPDATE {table}
   SET status = %(status)s,
       mensagem = %(mensagem)s,
       reenfileirado = %(requeue)s,
       estouro_tentativas = NOT %(requeue)s,
       proxima_tentativa = CASE WHEN %(requeue)s THEN {delay_from_now} END
 WHERE id = %(id)s AND status = 'processando'

-- name: task_defer
-- A running attempt put back, due again in %(delay)s seconds, without spending an attempt
-- (a webhook whose endpoint's circuit breaker is open): same row, same `tentativa`.
UPDATE {table}
   SET status = 'agendada',
       data_hora = {delay_from_now},
       mensagem = %(mensagem)s
 WHERE id = %(id)s AND status = 'processando'

-- name: part_fanout_payload
-- The subscriber task's payload: the publication's (part_fanout_payload_compat beside
-- 1.2.2 workers, PostgreSQL).
coalesce(p.payload, i.payload)

-- name: part_fanout_source
-- The publication (its first attempt's payload) and each matching active subscriber, in
-- subscriber order: written into subscriber_fanout (and its _compat variant).
  FROM {table} p
  LEFT JOIN {table} i ON i.id = p.id_inicial
  JOIN {sub_table} s
    ON s.processo = p.processo
   AND s.ativo
   AND (s.tenant IS NULL OR s.tenant = p.tenant)
   AND (s.grupo_empresarial IS NULL OR s.grupo_empresarial = p.grupo_empresarial)
 WHERE p.id = %(id)s
 ORDER BY s.id

-- name: task_insert
-- Without data_hora the task is due from {now} (PostgreSQL: the start of the producer's
-- transaction, one value for data_hora and data_hora_inicial; it becomes visible only at
-- commit).
INSERT INTO {table} (origem, destino, processo, chave_externa, payload, payload_hash,
                     tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial)
VALUES (%(origem)s, %(destino)s, %(processo)s, %(chave_externa)s, %(payload)s, %(payload_hash)s,
        %(tenant)s, %(grupo_empresarial)s, %(pub_sub)s, %(prioridade)s,
        {data_hora_or_now}, {data_hora_or_now})
{returning_id}

-- name: task_has_lost_pending
SELECT EXISTS (SELECT 1 FROM {table}
                WHERE status IN ('pendente', 'agendada')
                  AND data_hora <= {seconds_ago})
