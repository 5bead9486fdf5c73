-- Named queries of the lease backend (DB_POOL_MODE=transaction, engine/pooled/backend.py):
-- behind a transaction pooler nothing may live on a session, so a running task is owned
-- through a lease written in its row (lease_dono: the worker, lease_ate: until when),
-- extended by the worker's heartbeat and taken over by the rescue once expired.  Every
-- statement stands alone (autocommit) or runs in the caller's transaction; no session
-- state (advisory locks, PREPARE, SET) anywhere.  {table} and {admin_table} are rendered
-- once; values are %(name)s parameters.

-- name: lease_claim
-- Claims up to %(limit)s due tasks (priority, then age) in one autocommit statement: their
-- rows locked with SKIP LOCKED (never a task another claim holds), marked 'processando'
-- with this worker's lease.  Asynchronous commit for this implicit transaction only
-- (set_config(..., true), a transaction-level setting): a claim lost in a server crash
-- leaves the task waiting, to be claimed again.
UPDATE {table} t
   SET status = 'processando', lease_dono = %(dono)s,
       lease_ate = clock_timestamp() + %(lease)s * interval '1 second'
 WHERE t.id = ANY(ARRAY(SELECT c.id
                          FROM {table} c
                         WHERE c.status IN ('pendente', 'agendada')
                           AND c.data_hora <= now()
                         ORDER BY c.prioridade DESC, c.data_hora, c.id
                         LIMIT %(limit)s
                           FOR UPDATE SKIP LOCKED))
   AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
RETURNING {tarefa_cols}

-- name: lease_finish
-- The success mark, in the task's own transaction, only while this worker still owns the
-- task (fenced: after a take-over the row is 'falha' or owned by another lease, and the
-- task's transaction is rolled back).
UPDATE {table}
   SET status = 'sucesso', mensagem = %(mensagem)s, lease_ate = NULL
 WHERE id = %(id)s AND status = 'processando' AND lease_dono = %(dono)s

-- name: lease_extend
-- The heartbeat: the leases of this worker's running tasks move forward.  A row locked by
-- its own finishing transaction (or by a rescue) is skipped, never waited for.
UPDATE {table} t
   SET lease_ate = clock_timestamp() + %(lease)s * interval '1 second'
 WHERE t.id = ANY(ARRAY(SELECT c.id
                          FROM {table} c
                         WHERE c.id = ANY(%(ids)s) AND c.status = 'processando'
                           AND c.lease_dono = %(dono)s
                           FOR UPDATE SKIP LOCKED))
RETURNING t.id

-- name: lease_expired
-- The rescue: running tasks whose lease expired (their worker died, or lost the database
-- for longer than its lease), locked for the caller's transaction; one at a time.
SELECT id
  FROM {table}
 WHERE status = 'processando' AND lease_ate < clock_timestamp()
 ORDER BY id
 LIMIT 1
   FOR UPDATE SKIP LOCKED

-- name: lease_any_expired
-- Whether the rescue has anything to do (autocommit, over ix_running): most runs find
-- nothing and cost this one statement.
SELECT EXISTS (SELECT 1 FROM {table}
                WHERE status = 'processando' AND lease_ate < clock_timestamp())

-- name: lease_unclaim
-- A task claimed and not run (the worker stops): back to waiting, its lease dropped.
UPDATE {table}
   SET status = 'pendente', lease_dono = NULL, lease_ate = NULL
 WHERE id = %(id)s AND status = 'processando' AND lease_dono = %(dono)s

-- name: lease_columns
-- Whether the queue table has the lease columns (schema 7).
SELECT count(*) = 2
  FROM pg_catalog.pg_attribute
 WHERE attrelid = to_regclass(%(table)s) AND attname IN ('lease_dono', 'lease_ate')
   AND NOT attisdropped

-- name: admin_lease_take
-- An admin job's lock without a session: a lease row in <fila>_rotinas (rotina = the
-- key, executado_em = until when, executado_por = the owner), taken when free, expired,
-- or already this owner's (re-entrant).  horario is unused ('-infinity').
INSERT INTO {admin_table} AS r (rotina, horario, executado_em, executado_por)
VALUES (%(chave)s, '-infinity', clock_timestamp() + %(ttl)s * interval '1 second', %(dono)s)
ON CONFLICT (rotina) DO UPDATE
   SET executado_em = EXCLUDED.executado_em, executado_por = EXCLUDED.executado_por
 WHERE r.executado_em < clock_timestamp() OR r.executado_por = EXCLUDED.executado_por
RETURNING 1 AS ok

-- name: admin_lease_drop
DELETE FROM {admin_table} WHERE rotina = %(chave)s AND executado_por = %(dono)s

-- name: halt_set
-- HALT without a broadcast channel: the row rotina = 'halt' holds the time of the last
-- request (database clock); workers running before it stop.
INSERT INTO {admin_table} AS r (rotina, horario, executado_em, executado_por)
VALUES ('halt', '-infinity', clock_timestamp(), %(por)s)
ON CONFLICT (rotina) DO UPDATE
   SET executado_em = EXCLUDED.executado_em, executado_por = EXCLUDED.executado_por

-- name: lease_probe
-- An idle worker's one statement per poll: is a task due (task_has_due: one entry of ix_due
-- per waiting status, whatever the backlog), and the time of the last HALT request.
SELECT coalesce((SELECT min(data_hora) FROM {table} WHERE status = 'pendente') <= now(), FALSE)
    OR coalesce((SELECT min(data_hora) FROM {table} WHERE status = 'agendada') <= now(), FALSE)
         AS due,
       (SELECT executado_em FROM {admin_table} WHERE rotina = 'halt') AS halt

-- name: halt_get
SELECT executado_em FROM {admin_table} WHERE rotina = 'halt'

-- name: admin_table_exists
SELECT to_regclass(%(table)s) IS NOT NULL
