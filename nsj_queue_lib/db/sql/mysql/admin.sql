-- Named queries of the operator's commands (nsj_queue_lib.admin.QueueAdmin) and of the
-- workers' pause check (MySQL / MariaDB / SingleStore).  Same names and parameters as the
-- PostgreSQL file; times are DATETIME(6) in UTC; no literal percent sign may appear here.
-- A chain is a task's first attempt (its "root") and its retries (id_inicial = root);
-- its current state is its one attempt not re-queued (NOT reenfileirado).
-- Blocks whose text is the same in every dialect live in sql/common/admin.sql.

-- name: queue_pause_get
-- (no mixed-fleet mode on MySQL: 1.2.2 never ran natively here).  The next schedule slot
-- is row id = 3 (scheduling/hint.py), the concurrency limits' flag row id = 4, the
-- ordering keys' row id = 5
-- (db/limits.py); one row even without row id = 1 (never paused).
SELECT c.pausada, c.motivo, c.alterado_por, c.alterado_em, NULL AS compat_1_2_2,
       NULL AS compat_alterado_em, NULL AS compat_alterado_por,
       (SELECT alterado_em FROM {control_table} WHERE id = 3) AS agenda_proximo,
       (SELECT pausada FROM {control_table} WHERE id = 4) AS limites,
       (SELECT pausada FROM {control_table} WHERE id = 5) AS ordenacao
  FROM (SELECT 1 AS um) o
  LEFT JOIN {control_table} c ON c.id = 1

-- name: queue_pause_set
INSERT INTO {control_table} (id, pausada, motivo, alterado_por, alterado_em)
VALUES (1, %(pausada)s, %(motivo)s, %(por)s, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
   pausada = VALUES(pausada), motivo = VALUES(motivo),
   alterado_por = VALUES(alterado_por), alterado_em = VALUES(alterado_em)

-- name: queue_halt_set
-- HALT in native mode (no broadcast channel): row id = 2 holds the last request, timed by
-- the database; the workers running before it stop (engine/mysql/backend.py HaltWatch).
INSERT INTO {control_table} (id, pausada, motivo, alterado_por, alterado_em)
VALUES (2, FALSE, 'HALT', %(por)s, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE alterado_por = VALUES(alterado_por), alterado_em = VALUES(alterado_em)

-- name: queue_halt_get
SELECT alterado_em FROM {control_table} WHERE id = 2

-- name: control_table_exists
-- A queue created before the control table (2.1) has none: never paused then.
SELECT count(*) > 0
  FROM information_schema.tables
 WHERE table_name = %(name)s
   AND table_schema = coalesce(%(schema)s, DATABASE())
