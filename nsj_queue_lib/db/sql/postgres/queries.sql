-- Named queries of the PostgreSQL dialect.
-- Each block starts with "-- name: <name>"; {table}, {sub_table} and {tarefa_cols}
-- are identifiers rendered once at start-up; values are always %(name)s parameters.
-- The MySQL file has the same names, except the queries of this backend's own claim
-- (task_claim_locked, task_finish_unlock(_at_commit), notify); bodies identical in both dialects are in
-- sql/common/queries.sql.

-- name: task_insert_unique
-- insert_task(unique_key=...): no row when an unfinished task holds the key (the index
-- ix_unique); a transaction that inserted the key and has not ended makes this wait for it.
-- Nor in mixed-fleet mode (the repository then tells which it was): one round trip.
INSERT INTO {table} (origem, destino, processo, chave_externa, payload, payload_hash,
                     tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial,
                     chave_unica)
SELECT %(origem)s, %(destino)s, %(processo)s, %(chave_externa)s, %(payload)s, %(payload_hash)s,
       %(tenant)s::int8, %(grupo_empresarial)s, %(pub_sub)s, %(prioridade)s,
       coalesce(%(data_hora)s::timestamptz, now()), coalesce(%(data_hora)s::timestamptz, now()),
       %(chave_unica)s
 WHERE NOT coalesce((SELECT compat_1_2_2 FROM {control_table} WHERE id = 1), TRUE)
ON CONFLICT (chave_unica)
   WHERE chave_unica IS NOT NULL AND status IN ('pendente', 'agendada', 'processando')
   DO NOTHING
RETURNING id

-- name: task_unique_existing
-- The unfinished task holding a key (a new statement: it sees the transaction it waited for).
SELECT id FROM {table}
 WHERE chave_unica = %(chave_unica)s AND status IN ('pendente', 'agendada', 'processando')

-- name: task_insert_many
-- One statement for the whole batch: each parameter is an array (one per column).
INSERT INTO {table} (origem, destino, processo, chave_externa, payload, payload_hash,
                     tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial)
SELECT u.origem, u.destino, u.processo, u.chave_externa, u.payload, u.payload_hash,
       u.tenant, u.grupo_empresarial, u.pub_sub, u.prioridade,
       coalesce(u.data_hora, now()), coalesce(u.data_hora, now())
  FROM unnest(%(origem)s::varchar[], %(destino)s::varchar[], %(processo)s::varchar[],
              %(chave_externa)s::varchar[], %(payload)s::text[], %(payload_hash)s::varchar[],
              %(tenant)s::int8[], %(grupo_empresarial)s::varchar[], %(pub_sub)s::boolean[],
              %(prioridade)s::int[], %(data_hora)s::timestamptz[])
       AS u(origem, destino, processo, chave_externa, payload, payload_hash, tenant,
            grupo_empresarial, pub_sub, prioridade, data_hora)
RETURNING id

-- name: task_list_equivalent
SELECT {tarefa_cols}
  FROM {table} t
 WHERE t.payload_hash = %(payload_hash)s
   AND t.chave_externa IS NOT DISTINCT FROM %(chave_externa)s
   AND t.status = ANY(%(status)s)
   AND t.origem IS NOT DISTINCT FROM %(origem)s
   AND t.destino IS NOT DISTINCT FROM %(destino)s
   AND t.processo IS NOT DISTINCT FROM %(processo)s
   AND t.tenant IS NOT DISTINCT FROM %(tenant)s
   AND t.grupo_empresarial IS NOT DISTINCT FROM %(grupo_empresarial)s
 ORDER BY t.id

-- name: part_claim_pick
-- The due tasks a claim takes ({part_claim_pick} in the claims below), in claim order
-- (priority, then age, then id), read from a remembered position instead of the start of
-- ix_claim.  Why: every claim is a non-HOT update, so each task claimed leaves an entry
-- of its old 'pendente' version in ix_claim.  While a long transaction holds back the
-- xmin horizon those versions are not dead to all, so no scan can mark their entries
-- killed, and a scan from the index start visits the heap for every task processed since
-- that transaction began: the cost of a claim grew with the pin's length (#13).
-- {part_claim_status} is the status condition: a variant part (db/queries.py, VARIANT),
-- so this is also made as part_claim_pick_compat, with part_claim_status_compat, for the
-- claims beside 1.2.2 workers.
-- %(pos_prio)s / %(pos_from)s: the priority of the last task this session claimed and its
-- data_hora minus a slack (db/claim_position.py: tasks commit some time after their
-- data_hora, the producer transaction's now()).  Three branches, each an ix_claim range
-- with its own LIMIT and row locks; Append runs them in order and the outer LIMIT stops
-- it, so a later branch is not read once the earlier ones gave enough rows (FOR UPDATE
-- rules out a parallel plan):
--   a: higher priorities, from the index start (usually empty);
--   b: the same priority from %(pos_from)s on: it steps only over the entries of the
--      last seconds, not over every task processed since the pin began;
--   d: lower priorities, from their start.
-- A task of the same priority due before %(pos_from)s (committed late, put back to
-- 'pendente' by the rescue or a graceful stop, inserted with an old data_hora) is not
-- seen here: the session claims from the index start (pos_prio = 2147483647, pos_from
-- NULL: branches b and d then read the whole index) on its first claim and at least every
-- FULL_SCAN_EVERY seconds (db/claim_position.py), which bounds that wait.
SELECT p.id
  FROM (SELECT a.id FROM (SELECT c.id FROM {table} c
                          WHERE {part_claim_status}
                            AND c.data_hora <= now() AND c.prioridade > %(pos_prio)s::int4
                          ORDER BY c.prioridade DESC, c.data_hora, c.id
                          LIMIT %(limit)s FOR UPDATE SKIP LOCKED) a
        UNION ALL
        SELECT b.id FROM (SELECT c.id FROM {table} c
                          WHERE {part_claim_status}
                            AND c.data_hora <= now() AND c.prioridade = %(pos_prio)s::int4
                            AND c.data_hora >= coalesce(%(pos_from)s::timestamptz, '-infinity')
                          ORDER BY c.prioridade DESC, c.data_hora, c.id
                          LIMIT %(limit)s FOR UPDATE SKIP LOCKED) b
        UNION ALL
        SELECT d.id FROM (SELECT c.id FROM {table} c
                          WHERE {part_claim_status}
                            AND c.data_hora <= now() AND c.prioridade < %(pos_prio)s::int4
                          ORDER BY c.prioridade DESC, c.data_hora, c.id
                          LIMIT %(limit)s FOR UPDATE SKIP LOCKED) d) p
 LIMIT %(limit)s

-- name: part_claim_pick_full
-- part_claim_pick when the session reads from the index start (db/claim_position.py): one
-- ordered ix_claim scan without position parameters, the claim's plan as before the
-- position existed.  (With pos_prio = 2147483647 in part_claim_pick, a generic plan made
-- while the table held few rows may read branch d with a bitmap and a sort of every
-- waiting row, on every claim from the start.)  Made as part_claim_pick_full_compat too
-- ({part_claim_status}: see part_claim_pick).
SELECT c.id
  FROM {table} c
 WHERE {part_claim_status}
   AND c.data_hora <= now()
 ORDER BY c.prioridade DESC, c.data_hora, c.id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: part_claim_status
-- The statuses a claim takes ({part_claim_status} in part_claim_pick and
-- part_claim_pick_full).
c.status IN ('pendente', 'agendada')

-- name: part_claim_status_compat
-- part_claim_status beside 1.2.2 workers: 'agendada' rows only while holding 1.2.2's
-- notify key 3 shared (see part_claim_lock_compat).
(c.status = 'pendente'
 OR (c.status = 'agendada' AND (SELECT pg_try_advisory_xact_lock_shared(3))))

-- name: part_claim_locked_tail
-- The main SELECT of task_claim_locked and task_claim_locked_compat, after their claim (the
-- CTE c): the listener-turn release, the %(keep)s test and the next-due probe (see
-- task_claim_locked).
SELECT n.*,
       CASE WHEN n.id IS NULL OR %(turn_ns)s::int4 IS NULL THEN NULL
            WHEN %(keep)s::boolean AND NOT coalesce(n.nsjq_next_due <= 0, false) THEN false
            WHEN pg_try_advisory_xact_lock(%(turn_ns)s::int4, %(hand_id)s::int4) IS NOT NULL
            THEN pg_advisory_unlock(%(turn_ns)s::int4, %(turn_id)s::int4) END
         AS nsjq_turn_released
  FROM (SELECT c.*,
               CASE WHEN c.id IS NULL THEN ({part_seconds_to_next_due_from})
                    WHEN %(keep)s::boolean AND %(turn_ns)s::int4 IS NOT NULL
                    THEN ({part_seconds_to_next_due_besides}) END
                 AS nsjq_next_due
          FROM (SELECT 1) AS one LEFT JOIN c ON true
        OFFSET 0) AS n

-- name: part_claim_lock
-- The advisory lock a task claimed by task_claim_locked holds (engine/keys.py).
pg_try_advisory_lock(%(lock_ns)s,
         ((t.id & 4294967295) - CASE WHEN (t.id & 4294967295) >= 2147483648
                                     THEN 4294967296 ELSE 0 END)::int4)

-- name: part_claim_lock_compat
-- part_claim_lock while 1.2.2 workers may share the queue (task_claim_locked_compat):
-- each claimed task also holds 1.2.2's key (the raw id, bigint form), taken first so a
-- task a 1.2.2 worker is between its lock and its status check is skipped; when the 2.x
-- key then fails, the raw key is given back.  'agendada' rows are claimed only while
-- holding 1.2.2's notify key 3 shared (transaction-level: the statement,
-- part_claim_status_compat), so 1.2.2's unguarded agendada -> pendente update never hits
-- a task 2.x has taken.  Parameters and the one-time filter as in task_claim_locked.
CASE WHEN pg_try_advisory_lock(t.id)
            THEN CASE WHEN pg_try_advisory_lock(%(lock_ns)s,
                             ((t.id & 4294967295) - CASE WHEN (t.id & 4294967295) >= 2147483648
                                                         THEN 4294967296 ELSE 0 END)::int4)
                      THEN true
                      ELSE NOT pg_advisory_unlock(t.id) END
            ELSE false END

-- name: part_claim_xact_lock
-- The transaction-level advisory lock of a task claimed by task_claim_batch.
pg_try_advisory_xact_lock(%(lock_ns)s,
         ((t.id & 4294967295) - CASE WHEN (t.id & 4294967295) >= 2147483648
                                     THEN 4294967296 ELSE 0 END)::int4)

-- name: part_claim_xact_lock_compat
-- part_claim_xact_lock beside 1.2.2 workers (task_claim_batch_compat): also 1.2.2's raw-id
-- key (transaction-level, until the batch commits); 'agendada' rows with key 3 shared as
-- in part_claim_lock_compat.
CASE WHEN pg_try_advisory_xact_lock(t.id)
            THEN pg_try_advisory_xact_lock(%(lock_ns)s,
                   ((t.id & 4294967295) - CASE WHEN (t.id & 4294967295) >= 2147483648
                                               THEN 4294967296 ELSE 0 END)::int4)
            ELSE false END

-- name: task_claim_locked
-- Claims up to `limit` due tasks and takes their advisory locks in one statement
-- (autocommit), so 'processando' is visible while it runs and the lock lives on the
-- task's session.  `limit` is written into the statement as an integer (a prepared
-- statement per limit, see TaskRepository): with a LIMIT parameter PostgreSQL re-plans
-- every execution, its generic plan being costed for a tenth of the table.
-- The uncorrelated subquery (set_config ... IS NOT NULL) is evaluated once, before any row is read, even
-- when nothing is due (a one-time filter).  It does two things that would otherwise be
-- statements of their own:
-- * asynchronous commit for this implicit transaction only (set_config(..., true)).
--   Safe here: the task's own (synchronous) commit flushes the WAL up to and including
--   this claim, and a claim lost in a server crash only means the task is still
--   'pendente' and runs then; it halves the WAL flushes per task;
-- * %(unlock)s (bigint or NULL): 1.2.2's key of the task this session ran before
--   (engine/keys.py), released here instead of in a statement of its own.
-- %(turn_ns)s/%(turn_id)s (NULL, or the listener turn this session holds): released
-- only when a task was claimed (one row: used with limit 1 only), and, with %(keep)s (the
-- holder's recent tasks ran short: engine/postgres/listener_turn.py), only when another task
-- is due too: a lone short task keeps the turn, and its worker goes back to holding it
-- once done.  Before the release, the hand-over key %(hand_id)s is taken for this
-- implicit transaction: the next holder waits for it before its probe, so the probe sees
-- this claim committed (it would otherwise see the task still 'pendente' and claim in vain).
-- nsjq_next_due: when nothing was claimed, the idle probe (part_seconds_to_next_due_from,
-- %(due_from)s as there), read with the claim's snapshot: the worker that found nothing
-- then waits without a probe of its own (runtime/consumer.py, engine/postgres/idle.py); the
-- probe is an initPlan of the CASE, so it runs only then.  With %(keep)s and a task
-- claimed, the same probe for every task but that one (part_seconds_to_next_due_besides):
-- <= 0 means another task is due (the turn is handed on), else the turn is kept and its
-- holder waits by it.
-- (That main SELECT is part_claim_locked_tail.)
-- The claim beside 1.2.2 workers, task_claim_locked_compat, is this statement made with
-- the variant parts part_claim_status_compat and part_claim_lock_compat (db/queries.py).
-- With limit 1 the row is found by `t.id = (pick)` (TaskRepository._one_row_target: the
-- generic plan of `= ANY(...)` may scan the whole table).
WITH c AS (
UPDATE {table} t
   SET status = 'processando'
 WHERE t.id = ANY(ARRAY({part_claim_pick}))
   AND {part_claim_lock}
   AND (SELECT set_config('synchronous_commit', 'off', true)
               || coalesce(pg_advisory_unlock(%(unlock)s::int8)::text, '')) IS NOT NULL
RETURNING {tarefa_cols}
)
{part_claim_locked_tail}

-- name: task_claim_batch
-- Batch mode: inside the batch's transaction, claims up to %(limit)s due tasks (by priority,
-- then age) in one statement.  The new 'processando' is visible only at the batch's commit;
-- until then the row locks make other claims skip these rows, the rescue never sees them,
-- and the transaction-level advisory locks mark them as running (status tools, 1 per task).
-- A crash rolls the whole batch back: every task is 'pendente' again, nothing half-done.
-- Made as task_claim_batch_compat too, with part_claim_status_compat and
-- part_claim_xact_lock_compat (db/queries.py).
UPDATE {table} t
   SET status = 'processando'
 WHERE t.id IN ({part_claim_pick})
   AND {part_claim_xact_lock}
RETURNING {tarefa_cols}

-- name: task_claim_candidates
SELECT id
  FROM {table}
 WHERE status IN ('pendente', 'agendada')
   AND data_hora <= now()
 ORDER BY prioridade DESC, data_hora, id
 LIMIT %(limit)s

-- name: task_mark_processing
SET LOCAL synchronous_commit = off;
UPDATE {table} t
   SET status = 'processando'
 WHERE t.id = %(id)s
   AND t.status IN ('pendente', 'agendada')
RETURNING {tarefa_cols}

-- name: task_locks_release_stale
-- After a claim statement that failed (PgGuard): its UPDATE was rolled back, but a
-- session advisory lock that pg_try_advisory_lock took before the error is not undone,
-- and would hide the still 'pendente' task from every other worker's claim until this
-- session ends.  Releases, once each, the task locks this session holds in the queue's
-- namespace %(lock_ns)s (two-int32 form, objsubid 2) except %(keep_ns)s (the objid, as
-- unsigned int32, of the tasks it runs) and, with %(legacy)s, the 1.2.2 raw keys
-- (bigint form, objsubid 1) that are ids of this queue's tasks, except %(keep_raw)s
-- (the tasks it runs and the deferred key).  One row per lock released: a lock taken
-- twice needs a second run.
SELECT l.objsubid,
       CASE WHEN l.objsubid = 2
            THEN pg_advisory_unlock(%(lock_ns)s::int4,
                   (l.objid::int8 - CASE WHEN l.objid::int8 >= 2147483648
                                         THEN 4294967296 ELSE 0 END)::int4)
            ELSE pg_advisory_unlock((l.classid::int8 << 32) | l.objid::int8) END
         AS released
  FROM pg_locks l
 WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.granted
   AND ((l.objsubid = 2 AND l.classid::int8 = (%(lock_ns)s::int8 & 4294967295)
         AND NOT l.objid::int8 = ANY(%(keep_ns)s::int8[]))
        OR (%(legacy)s AND l.objsubid = 1
            AND NOT ((l.classid::int8 << 32) | l.objid::int8) = ANY(%(keep_raw)s::int8[])
            AND EXISTS (SELECT 1 FROM {table} t
                         WHERE t.id = ((l.classid::int8 << 32) | l.objid::int8))))

-- name: task_finish_unlock
-- Success mark and lock release in one round trip; the status guard makes the early
-- unlock safe (a rescuer blocks on the row and then finds it 'sucesso').
UPDATE {table}
   SET status = 'sucesso', mensagem = %(mensagem)s
 WHERE id = %(id)s AND status = 'processando'
RETURNING pg_advisory_unlock(%(lock_ns)s, %(lock_id)s)

-- name: task_finish_unlock_at_commit
-- task_finish_unlock sent in the same message as the task's COMMIT (PgGuard): the message
-- cannot look at the UPDATE's row count before the COMMIT, so a row no longer
-- 'processando' (the task was taken over by a rescue) fails the statement instead: the
-- COMMIT after it is then skipped and the task's work is rolled back, as a False from
-- task_finish_unlock did.  The failure is a cast of a text made with count(*) (not a
-- constant, so never evaluated while planning): SQLSTATE 22P02 with 'nsjq_taken_over' in
-- its text.
WITH u AS (
UPDATE {table}
   SET status = 'sucesso', mensagem = %(mensagem)s
 WHERE id = %(id)s AND status = 'processando'
RETURNING pg_advisory_unlock(%(lock_ns)s, %(lock_id)s)
)
SELECT CASE WHEN count(*) = 1 THEN 1
            ELSE ('nsjq_taken_over: ' || count(*) || ' rows')::int END AS done
  FROM u

-- name: task_lock_waiting
-- Client/server mode, inside the finishing task's transaction: the rows of the ids the
-- server handed out locked (%(ids)s) that are still waiting, row-locked;
-- task_finish_mark then marks them with the finished task's success, in one UPDATE.
SELECT {tarefa_cols}
  FROM {table} t
 WHERE t.id = ANY(%(ids)s) AND t.status IN ('pendente', 'agendada')
   FOR UPDATE

-- name: task_finish_mark
-- Client/server mode: task_finish of task %(id)s and the 'processando' mark of the other
-- rows of %(ids)s (locked by task_lock_waiting in this transaction) in one UPDATE, two
-- statements less per task than task_finish + task_mark_processing (SET LOCAL and the
-- UPDATE).  %(ids)s holds %(id)s too.  The row count is the sum of both.
UPDATE {table}
   SET status = CASE WHEN id = %(id)s THEN 'sucesso' ELSE 'processando' END,
       mensagem = CASE WHEN id = %(id)s THEN %(mensagem)s ELSE mensagem END
 WHERE id = ANY(%(ids)s)
   AND CASE WHEN id = %(id)s THEN status = 'processando'
            ELSE status IN ('pendente', 'agendada') END

-- name: task_finish_many
-- Batch mode: the success marks of the tasks of a batch that succeeded, in one statement
-- right before the batch's COMMIT (runtime/batch.py); %(ids)s and %(mensagens)s are
-- arrays in the same order.  Only rows still 'processando' (the caller compares the count).
UPDATE {table} t
   SET status = 'sucesso', mensagem = m.mensagem
  FROM unnest(%(ids)s::int8[], %(mensagens)s::text[]) AS m(id, mensagem)
 WHERE t.id = m.id AND t.status = 'processando'

-- name: task_due_beyond_one
-- Whether more than one task is due (at most two live index entries read): the listener
-- turn's granted worker, finding tasks due, claims one and goes on claiming directly only
-- when there is a backlog; else it queues for the turn again after the task.
-- %(due_from)s (NULL: from the start): the session's claim position, as in
-- task_seconds_to_next_due_from.  One ix_due range per status (ORDER BY data_hora keeps the
-- planner on ix_due: on ix_claim data_hora is not the leading column).
SELECT count(*) > 1
  FROM (SELECT 1 FROM (SELECT 1 FROM {table}
                        WHERE status = 'pendente' AND data_hora <= now()
                          AND data_hora >= coalesce(%(due_from)s::timestamptz, '-infinity')
                        ORDER BY data_hora
                        LIMIT 2) AS p
        UNION ALL
        SELECT 1 FROM (SELECT 1 FROM {table}
                        WHERE status = 'agendada' AND data_hora <= now()
                          AND data_hora >= coalesce(%(due_from)s::timestamptz, '-infinity')
                        ORDER BY data_hora
                        LIMIT 2) AS a
        LIMIT 2) AS d

-- name: xmin_horizon_held
-- Whether something holds the xmin horizon more than %(age)s transactions back: then the
-- index entries of the rows updated since cannot be marked killed, and claims read from
-- the session's claim position (db/claim_position.py).  What can hold it: a session's
-- snapshot (a long or idle-in-transaction session; backend_xmin is shown for every role's
-- sessions; every database counts, as it does before PostgreSQL 14, and a walsender with
-- hot_standby_feedback has no database), a replication slot, a forgotten prepared
-- transaction.  A VACUUM's own xmin also counts, though it holds nothing back: at worst
-- claims then read from the position while it runs.
SELECT coalesce(greatest((SELECT max(age(backend_xmin)) FROM pg_stat_activity),
                         (SELECT max(age(xmin)) FROM pg_replication_slots),
                         (SELECT max(age(transaction)) FROM pg_prepared_xacts)), 0) > %(age)s

-- name: part_seconds_to_next_due_from
-- task_seconds_to_next_due from the session's claim position (%(due_from)s: its data_hora
-- minus the slack; NULL: from the start), for the idle probes of PostgreSQL (the listener
-- turn's granting statement among them).  Under a pinned xmin, min() from the start of
-- ix_due steps over an entry of every task processed since the pin began (see
-- part_claim_pick); from the position it steps over those of the last seconds.  A task due
-- before the position is not seen: the probe is from the start at least every
-- FULL_SCAN_EVERY seconds, and the worker waits no longer than that after a positioned
-- probe (db/claim_position.py).
SELECT extract(epoch FROM (least(
         (SELECT min(data_hora) FROM {table}
           WHERE status = 'pendente'
             AND data_hora >= coalesce(%(due_from)s::timestamptz, '-infinity')),
         (SELECT min(data_hora) FROM {table}
           WHERE status = 'agendada'
             AND data_hora >= coalesce(%(due_from)s::timestamptz, '-infinity'))) - now()))

-- name: part_seconds_to_next_due_besides
-- part_seconds_to_next_due_from for every task but c.id (the one the claim just took; its
-- snapshot still sees it 'pendente'), in the claims of task_claim_locked*.
SELECT extract(epoch FROM (least(
         (SELECT min(data_hora) FROM {table}
           WHERE status = 'pendente' AND id <> c.id
             AND data_hora >= coalesce(%(due_from)s::timestamptz, '-infinity')),
         (SELECT min(data_hora) FROM {table}
           WHERE status = 'agendada' AND id <> c.id
             AND data_hora >= coalesce(%(due_from)s::timestamptz, '-infinity'))) - now()))

-- name: task_seconds_to_next_due_from
-- The idle probe as a statement of its own (see part_seconds_to_next_due_from).
{part_seconds_to_next_due_from}

-- name: task_seconds_to_next_due
-- One index range per status (the earliest of each), whatever the backlog.
SELECT extract(epoch FROM (least(
         (SELECT min(data_hora) FROM {table} WHERE status = 'pendente'),
         (SELECT min(data_hora) FROM {table} WHERE status = 'agendada')) - now()))

-- name: part_promote_guard_compat
-- task_promote_scheduled beside 1.2.2 workers: only while holding 1.2.2's notify key 3
-- shared (this statement), never while its notify thread walks the 'agendada' rows.
AND (SELECT pg_try_advisory_xact_lock_shared(3))

-- name: task_promote_scheduled
-- The outer status check is re-evaluated on rows changed meanwhile: a task a worker
-- claimed in between (now 'processando') is never put back to 'pendente'.
-- {part_promote_guard} is optional: left out here; task_promote_scheduled_compat (the
-- promotion beside 1.2.2 workers) has part_promote_guard_compat there (db/queries.py).
UPDATE {table}
   SET status = 'pendente'
 WHERE status = 'agendada'
   AND id IN (SELECT id FROM {table}
               WHERE status = 'agendada' AND data_hora <= now()
                 {part_promote_guard}
               ORDER BY data_hora
               LIMIT %(limit)s
                 FOR UPDATE SKIP LOCKED)

-- name: compat_evidence
-- Signs that nsj-queue-lib 1.2.2 workers use this queue, from sessions of other programs
-- (the 2.x sessions are recognised by their application_name):
-- * sessoes: the last statement is one only 1.2.2 sends about this queue: LISTEN on its
--   channel, or its scan of the queue aliased "as tarefa" (an idle 1.2.2 worker's last
--   statement is often that scan);
-- * sessoes_lock: the last statement is a one-bigint advisory lock (1.2.2 locks task ids
--   so), which names no queue: another queue's 1.2.2 worker or another program may send
--   it too;
-- * falha_processando: rows of the last day with the status only 1.2.2's rescue writes;
-- * ocultas: sessions of other roles whose statements this role may not read (without
--   pg_read_all_stats): 1.2.2 workers among them cannot be told.
SELECT (SELECT count(*) FROM {table}
         WHERE status = 'falha_processando'
           AND data_hora > now() - interval '1 day') AS falha_processando,
       count(*) FILTER (WHERE a.specific) AS sessoes,
       count(*) FILTER (WHERE NOT a.specific AND a.query ~* 'pg_(try_)?advisory_(un)?lock\(\s*\d+\s*\)')
         AS sessoes_lock,
       count(*) FILTER (WHERE a.query = '<insufficient privilege>') AS ocultas
  FROM (SELECT s.query,
               (s.query ~* ('^\s*listen\s+"?' || %(channel)s || '"?\s*$')
                OR s.query ~* ('\mfrom\s+("?\w+"?\.)?"?' || %(channel)s || '"?\s+as\s+tarefa\M'))
                 AS specific
          FROM pg_stat_activity s
         WHERE s.datname = current_database()
           AND s.pid <> pg_backend_pid()
           AND coalesce(s.application_name, '') NOT LIKE 'nsj_queue_lib%%') AS a

-- name: task_purge
-- Deletes old rows of finished chains only: no attempt of the chain is still waiting or
-- running, and the whole chain is older than the limit (so no payload holder goes early).
DELETE FROM {table}
 WHERE id IN (SELECT t.id
                FROM {table} t
               WHERE t.data_hora < now() - %(days)s * interval '1 day'
                 AND NOT EXISTS (
                     SELECT 1 FROM {table} a
                      WHERE (a.id = coalesce(t.id_inicial, t.id)
                             OR a.id_inicial = coalesce(t.id_inicial, t.id))
                        AND (a.status IN ('pendente', 'agendada', 'processando')
                             OR a.data_hora >= now() - %(days)s * interval '1 day'))
               LIMIT %(limit)s)

-- name: notify
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: part_fanout_payload_compat
-- subscriber_fanout beside 1.2.2 workers (subscriber_fanout_compat): each subscriber task
-- carries the 1.2.2 envelope {"publication": <publication text>, "subscription":
-- <subscriber row>}, the payload 1.2.2's pub/sub and webhook workers expect (2.x reads
-- both forms).
json_build_object(
         'publication', coalesce(p.payload, i.payload),
         'subscription', json_build_object(
           'id', s.id, 'tenant', s.tenant, 'grupo_empresarial', s.grupo_empresarial,
           'processo', s.processo, 'url', s.url, 'http_method', s.http_method,
           'headers', s.headers, 'ativo', s.ativo,
           'created_at', to_char(s.created_at, 'YYYY-MM-DD"T"HH24:MI:SS')))::text

-- name: server_free_connections
-- Connections an ordinary role may hold on the server (max_connections less the reserved
-- ones) and how many of those are free now (runtime/capacity.py, before QUEUE_CONCURRENCY
-- threads connect).
SELECT u.usable - (SELECT count(*) FROM pg_stat_activity
                    WHERE backend_type = 'client backend') AS livres,
       u.usable AS utilizaveis,
       current_setting('max_connections')::int AS maximo
  FROM (SELECT current_setting('max_connections')::int
               - current_setting('superuser_reserved_connections')::int
               - coalesce(current_setting('reserved_connections', true)::int, 0) AS usable) u

-- name: queue_mixed_fleet
-- Whether 1.2.2 workers may share the queue (no control row: yes): unique tasks refuse it.
SELECT coalesce((SELECT compat_1_2_2 FROM {control_table} WHERE id = 1), TRUE)
