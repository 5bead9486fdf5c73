-- Named queries of the MySQL / MariaDB / SingleStore dialect.
-- Same names and %(name)s parameters as sql/postgres/queries.sql, except the queries of
-- one backend's claim (a unit test keeps both in step); bodies identical in both dialects
-- are in sql/common/queries.sql; {table}, {sub_table}, {tarefa_cols} and {tarefa_json} are
-- identifiers rendered once at start-up; values are always parameters. No literal percent sign may appear here
-- (pymysql would read it as a placeholder).
--
-- What differs from PostgreSQL:
-- * No RETURNING: TaskRepository uses cursor.lastrowid after an INSERT and re-selects the
--   row after task_mark_processing.
-- * "Now" is UTC_TIMESTAMP(6) (microseconds; CURRENT_TIMESTAMP() has whole seconds and
--   delayed due tasks by up to a second), against DATETIME(6) columns holding UTC, so the
--   caller's session time_zone does not matter. Timestamps come back as naive datetimes
--   in UTC; the repository stores an aware data_hora converted to UTC, a naive one as is.
-- * Fractional second intervals are written in whole microseconds
--   (INTERVAL ROUND(x * 1000000) MICROSECOND), which every MySQL flavour takes exactly.
-- * IS NOT DISTINCT FROM is <=>; "= ANY(array)" is IN (...), expanded by the repository
--   into one placeholder per status.
-- * LIMIT cannot sit inside an IN (subquery) (error 1235), and a DELETE/UPDATE cannot read
--   its own table in a subquery (error 1093): purge and promotion join the table to a
--   derived table with the LIMIT, which MySQL materialises first.
-- * The claim strategies (PostgreSQL advisory locks in SQL, the socket server's locks)
--   live in the engine backends; queries only one backend uses exist only in its
--   dialect's file.

-- name: task_insert_unique
-- insert_task(unique_key=...): when an unfinished task holds the key (the unique index on
-- the generated column chave_unica_ativa) nothing is inserted and lastrowid is that task's
-- id (LAST_INSERT_ID(id)); a transaction that inserted the key and has not ended makes
-- this wait for it.
INSERT INTO {table} (origem, destino, processo, chave_externa, payload, payload_hash,
                     tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial,
                     chave_unica)
VALUES (%(origem)s, %(destino)s, %(processo)s, %(chave_externa)s, %(payload)s, %(payload_hash)s,
        %(tenant)s, %(grupo_empresarial)s, %(pub_sub)s, %(prioridade)s,
        coalesce(CAST(%(data_hora)s AS DATETIME(6)), UTC_TIMESTAMP(6)),
        coalesce(CAST(%(data_hora)s AS DATETIME(6)), UTC_TIMESTAMP(6)),
        %(chave_unica)s)
ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)

-- name: task_unique_existing
SELECT id FROM {table} WHERE chave_unica_ativa = %(chave_unica)s

-- name: task_insert_many
-- One row here; the repository repeats the VALUES tuple once per task (parameters
-- suffixed _0, _1, ...) into one multi-row INSERT, whose lastrowid is the first row's id.
INSERT INTO {table} (origem, destino, processo, chave_externa, payload, payload_hash,
                     tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial)
VALUES (%(origem)s, %(destino)s, %(processo)s, %(chave_externa)s, %(payload)s, %(payload_hash)s,
        %(tenant)s, %(grupo_empresarial)s, %(pub_sub)s, %(prioridade)s,
        coalesce(CAST(%(data_hora)s AS DATETIME(6)), UTC_TIMESTAMP(6)),
        coalesce(CAST(%(data_hora)s AS DATETIME(6)), UTC_TIMESTAMP(6)))

-- name: task_list_equivalent
-- %(status)s is expanded by the repository into (%(status_0)s, %(status_1)s, ...).
SELECT {tarefa_cols}
  FROM {table} t
 WHERE t.payload_hash = %(payload_hash)s
   AND t.chave_externa <=> %(chave_externa)s
   AND t.status IN %(status)s
   AND t.origem <=> %(origem)s
   AND t.destino <=> %(destino)s
   AND t.processo <=> %(processo)s
   AND t.tenant <=> %(tenant)s
   AND t.grupo_empresarial <=> %(grupo_empresarial)s
 ORDER BY t.id

-- name: task_claim_skip_locked
-- MySQL native mode, inside the claim transaction: lock up to %(limit)s due rows that no
-- other claim holds (SKIP LOCKED).  The candidates come from one ordered index range per
-- waiting status (ix_claim), materialised first, so the cost does not grow with the
-- backlog; only their rows are locked.  Each row comes as one JSON array column
-- ({tarefa_json}): pymysql decodes column metadata in Python, 26 columns cost more than the
-- rest of the claim.
SELECT {tarefa_json}
  FROM {table} t
  JOIN ((SELECT id, prioridade, data_hora
           FROM {table}
          WHERE status = 'pendente' AND data_hora <= UTC_TIMESTAMP(6)
          ORDER BY prioridade DESC, data_hora, id
          LIMIT %(candidates)s)
        UNION ALL
        (SELECT id, prioridade, data_hora
           FROM {table}
          WHERE status = 'agendada' AND data_hora <= UTC_TIMESTAMP(6)
          ORDER BY prioridade DESC, data_hora, id
          LIMIT %(candidates)s)) c ON c.id = t.id
 WHERE t.status IN ('pendente', 'agendada')
 ORDER BY c.prioridade DESC, c.data_hora, c.id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: task_claim_ahead_pending
-- MySQL native mode, the claim-ahead inside the finishing task's transaction (the path of
-- every task while there is a backlog): task_claim_skip_locked restricted to 'pendente',
-- one ordered range of ix_claim read straight into the row locks, without the derived
-- table of the two ranges (materialised and sorted at each call, and read by a consistent
-- read, which on the hot head of the index rebuilds row versions: about a third of the
-- server's work per task).  The native worker's session runs at READ COMMITTED
-- (engine/mysql/backend.py), where this locking read locks no index gaps: at REPEATABLE
-- READ it would lock the gap before the first waiting entry until the commit, and an
-- INSERT of a task of a higher priority, or of a retry ('agendada'), would wait for it.
-- The order is the full claim's only while no 'agendada' task is due: the value after the
-- row's own in its JSON array (an index-only max() on ix_due; not a column of its own,
-- see {tarefa_json}) says when one is, and the caller then runs
-- task_claim_skip_locked in the same transaction.  An empty answer says nothing about
-- 'agendada' rows (the idle turn's probe sees them).  MariaDB answers the max() while
-- optimising, by one read of ix_due backwards from ('agendada', now): it meets a due
-- 'agendada' entry or leaves the status at once.  Not min(data_hora) <= now, the same
-- answer: its read goes forwards from ('agendada') until an entry visible to the
-- statement, so with no 'agendada' row it walks into the head of the 'pendente' entries
-- (claimed rows, delete-marked until purged, each checked against the clustered index
-- while other workers' open claims modify that page): 8.5% of the server's CPU in a
-- 4-worker run (bench/README.md, session 15).
SELECT JSON_ARRAY({tarefa_json_items},
                  (SELECT max(data_hora) FROM {table}
                    WHERE status = 'agendada' AND data_hora <= UTC_TIMESTAMP(6))
                  IS NOT NULL) AS tarefa_json
  FROM {table} t
 WHERE t.status = 'pendente' AND t.data_hora <= UTC_TIMESTAMP(6)
 ORDER BY t.prioridade DESC, t.data_hora, t.id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: task_mark_processing_locked
-- MySQL native mode, same transaction: take each row's session named lock (the name is
-- %(lock_prefix)s + the task id wrapped to int32, as engine/keys computes it) and
-- mark it 'processando'.  A row whose lock is held elsewhere stays as it is.
-- %(ids)s is expanded by the repository into (%(ids_0)s, %(ids_1)s, ...).
UPDATE {table}
   SET status = 'processando'
 WHERE id IN %(ids)s
   AND status IN ('pendente', 'agendada')
   AND GET_LOCK(CONCAT(%(lock_prefix)s,
                       (id & 4294967295)
                       - IF((id & 4294967295) >= 2147483648, 4294967296, 0)), 0) = 1

-- name: task_mark_processing_batch
-- Batch mode (QUEUE_BATCH_SIZE), same transaction as task_claim_skip_locked: mark the
-- locked rows 'processando' (no named lock: until the batch commits nobody else sees
-- them, and a crash rolls them back to waiting).  %(ids)s is expanded by the repository.
UPDATE {table}
   SET status = 'processando'
 WHERE id IN %(ids)s
   AND status IN ('pendente', 'agendada')

-- name: task_finish_many
-- Batch mode: the success marks of the tasks of a batch that succeeded, in one statement
-- right before the batch's COMMIT (runtime/batch.py): each row gets the message at its
-- id's position.  %(ids)s and %(mensagens)s are expanded by the repository into
-- comma-separated parameters in the same order.  Only rows still 'processando'.
UPDATE {table}
   SET status = 'sucesso', mensagem = ELT(FIELD(id, %(ids)s), %(mensagens)s)
 WHERE id IN (%(ids)s)
   AND status = 'processando'

-- name: task_list_processing
-- %(ids)s is expanded by the repository.
SELECT id FROM {table} WHERE id IN %(ids)s AND status = 'processando'

-- name: task_finish_release
-- MySQL native mode: the success mark and the task's named lock release in one round trip
-- (like PostgreSQL's task_finish_unlock); the row stays locked by this UPDATE until the
-- commit, so a rescuer that sees the lock free skips the row (SKIP LOCKED) and then finds
-- it 'sucesso'.  RELEASE_LOCK gives 1 for a lock of this session, 0 for another session's
-- and NULL for a lock nobody holds: only this session can have released it (the lock is
-- taken at the claim and dies only with the session), in an earlier try of this statement
-- that the database then refused (a message the column's charset cannot store), so NULL
-- counts as this session's.
UPDATE {table}
   SET status = 'sucesso', mensagem = %(mensagem)s
 WHERE id = %(id)s AND status = 'processando' AND coalesce(RELEASE_LOCK(%(lock_name)s), 1) = 1

-- name: task_finish_release_mark
-- MySQL native mode, claim-ahead: task_finish_release of task %(id)s and
-- task_mark_processing_locked of the other rows of %(ids)s (locked by
-- task_claim_skip_locked in this transaction) in one UPDATE, one round trip less per task.
-- %(ids)s (expanded by the repository) holds %(id)s too: the WHERE is one primary-key
-- list, which the optimiser handles faster than an OR of two conditions.  The row count
-- is the sum of both.
UPDATE {table}
   SET status = IF(id = %(id)s, 'sucesso', 'processando'),
       mensagem = IF(id = %(id)s, %(mensagem)s, mensagem)
 WHERE id IN %(ids)s
   AND IF(id = %(id)s,
          status = 'processando' AND coalesce(RELEASE_LOCK(%(lock_name)s), 1) = 1,
          status IN ('pendente', 'agendada')
          AND GET_LOCK(CONCAT(%(lock_prefix)s,
                              (id & 4294967295)
                              - IF((id & 4294967295) >= 2147483648, 4294967296, 0)), 0) = 1)

-- name: task_lock_waiting
-- Client/server mode on MySQL, inside the finishing task's transaction: the rows of the
-- ids the server handed out locked (%(ids)s, expanded by the repository) that are still
-- waiting, row-locked and read as one JSON column ({tarefa_json}, as the native claim);
-- task_finish_mark then marks them with the finished task's success, in one UPDATE.
SELECT {tarefa_json}
  FROM {table} t
 WHERE t.id IN %(ids)s AND t.status IN ('pendente', 'agendada')
   FOR UPDATE

-- name: task_try_lock_row_nowait
-- task_try_lock_row (the rescue's fence) on a server with NOWAIT but no SKIP LOCKED
-- (MariaDB 10.3 to 10.5, client/server mode): a row a running task transaction holds
-- fails at once (error 1205) instead of being skipped; the repository reads that as
-- "held".
SELECT id FROM {table} WHERE id = %(id)s AND status = 'processando' FOR UPDATE NOWAIT

-- name: session_lock_wait_get
-- The session's InnoDB row-lock wait (seconds), kept while the fence of a server with
-- neither SKIP LOCKED nor NOWAIT (MySQL 5.7, MariaDB < 10.3) waits one second at most.
SELECT @@SESSION.innodb_lock_wait_timeout AS seconds

-- name: session_lock_wait_set
SET SESSION innodb_lock_wait_timeout = %(seconds)s

-- name: session_lock_wait_get_singlestore
-- The same on SingleStore, whose row locks obey lock_wait_timeout.
SELECT @@SESSION.lock_wait_timeout AS seconds

-- name: session_lock_wait_set_singlestore
SET SESSION lock_wait_timeout = %(seconds)s

-- name: task_finish_mark
-- Client/server mode on MySQL: task_finish of task %(id)s and the 'processando' mark of
-- the other rows of %(ids)s (locked by task_lock_waiting in this transaction) in one
-- UPDATE, two statements less per task than task_finish + task_mark_processing +
-- task_get.  %(ids)s (expanded by the repository) holds %(id)s too, as in
-- task_finish_release_mark.  The row count is the sum of both.
UPDATE {table}
   SET status = IF(id = %(id)s, 'sucesso', 'processando'),
       mensagem = IF(id = %(id)s, %(mensagem)s, mensagem)
 WHERE id IN %(ids)s
   AND IF(id = %(id)s, status = 'processando', status IN ('pendente', 'agendada'))

-- name: task_claim_candidates
-- One ordered index range per waiting status (ix_claim), merged; never a sort of the
-- whole backlog.
SELECT c.id
  FROM ((SELECT id, prioridade, data_hora
           FROM {table}
          WHERE status = 'pendente' AND data_hora <= UTC_TIMESTAMP(6)
          ORDER BY prioridade DESC, data_hora, id
          LIMIT %(limit)s)
        UNION ALL
        (SELECT id, prioridade, data_hora
           FROM {table}
          WHERE status = 'agendada' AND data_hora <= UTC_TIMESTAMP(6)
          ORDER BY prioridade DESC, data_hora, id
          LIMIT %(limit)s)) c
 ORDER BY c.prioridade DESC, c.data_hora, c.id
 LIMIT %(limit)s

-- name: task_mark_processing
-- The repository re-reads the row ({tarefa_cols}) with task_get when one row changed.
UPDATE {table}
   SET status = 'processando'
 WHERE id = %(id)s
   AND status IN ('pendente', 'agendada')

-- name: task_seconds_to_next_due
-- Seconds (DECIMAL, with microseconds) until the earliest waiting task; negative when due.
-- One min() per status, each read from the end of ix_due (a min() over IN scans it all).
SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), min(x.m)) / 1000000
  FROM (SELECT min(data_hora) AS m FROM {table} WHERE status = 'pendente'
        UNION ALL
        SELECT min(data_hora) FROM {table} WHERE status = 'agendada') x

-- name: task_promote_scheduled
-- Multi-table UPDATE joined by primary key to a materialised derived table.
UPDATE {table} u
  JOIN (SELECT id FROM {table}
         WHERE status = 'agendada' AND data_hora <= UTC_TIMESTAMP(6)
         ORDER BY data_hora
         LIMIT %(limit)s) x ON x.id = u.id
   SET u.status = 'pendente'
 WHERE u.status = 'agendada'

-- name: task_purge
-- Deletes old rows of finished chains only: no attempt of the chain is still waiting or
-- running, and the whole chain is older than the limit (so no payload holder goes early).
-- An attempt a belongs to the chain of root r when a.id = r or a.id_inicial = r.
-- Multi-table DELETE joined by primary key to a materialised derived table (LIMIT cannot
-- sit inside IN (subquery), and "id IN (derived)" would scan the whole table).
DELETE d
  FROM {table} d
  JOIN (SELECT t.id
          FROM {table} t
         WHERE t.data_hora < UTC_TIMESTAMP(6) - INTERVAL %(days)s DAY
           AND NOT EXISTS (
               SELECT 1 FROM {table} a
                WHERE (a.id = coalesce(t.id_inicial, t.id)
                       OR a.id_inicial = coalesce(t.id_inicial, t.id))
                  AND (a.status IN ('pendente', 'agendada', 'processando')
                       OR a.data_hora >= UTC_TIMESTAMP(6) - INTERVAL %(days)s DAY))
         ORDER BY t.data_hora
         LIMIT %(limit)s) x ON x.id = d.id

-- name: server_binlog_statement
-- MySQL native mode: 1 when the server writes its binary log in STATEMENT format, where
-- InnoDB refuses every write of a session at READ COMMITTED (error 1665); the worker's
-- session then stays at the server's level (engine/mysql/backend.py).
SELECT @@log_bin = 1 AND upper(@@binlog_format) = 'STATEMENT' AS statement_binlog

-- name: server_free_connections
-- Connections the server accepts (max_connections) and how many are free now
-- (runtime/capacity.py, before QUEUE_CONCURRENCY threads connect).
SELECT @@max_connections - (SELECT count(*) FROM information_schema.PROCESSLIST) AS livres,
       @@max_connections AS utilizaveis,
       @@max_connections AS maximo

-- name: queue_mixed_fleet
-- (1.2.2 ran on PostgreSQL only: a MySQL queue is never in mixed-fleet mode; task_insert_unique
-- does not look)
SELECT FALSE
