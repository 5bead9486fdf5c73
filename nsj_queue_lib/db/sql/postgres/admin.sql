-- Named queries of the operator's commands (nsj_queue_lib.admin.QueueAdmin) and of the
-- workers' pause check (PostgreSQL).  Same names and parameters as the MySQL file.
-- {table} and {control_table} are identifiers rendered once; values are %(name)s parameters.
-- A chain is a task's first attempt (its "root") and its retries (id_inicial = root);
-- its current state is its one attempt not re-queued (NOT reenfileirado).
-- Blocks whose text is the same in every dialect live in sql/common/admin.sql.

-- name: queue_pause_get
-- The control row: the pause flag, and the queue's mixed-fleet mode (NULL when the row
-- predates the column: a queue of an earlier 2.x not upgraded yet, mixed-fleet).  Read
-- through the row's JSON so that such a queue needs no statement of its own.  And the next
-- schedule slot (scheduling/hint.py) and whether the queue has concurrency limits
-- (db/limits.py), read the same way.
SELECT c.pausada, c.motivo, c.alterado_por, c.alterado_em,
       (to_jsonb(c) ->> 'compat_1_2_2')::boolean AS compat_1_2_2,
       (to_jsonb(c) ->> 'compat_alterado_em')::timestamptz AS compat_alterado_em,
       to_jsonb(c) ->> 'compat_alterado_por' AS compat_alterado_por,
       (to_jsonb(c) ->> 'agenda_proximo')::timestamptz AS agenda_proximo,
       (to_jsonb(c) ->> 'limites')::boolean AS limites,
       (to_jsonb(c) ->> 'ordenacao_desde') IS NOT NULL AS ordenacao
  FROM {control_table} c
 WHERE c.id = 1

-- name: queue_compat_set
-- Sets the mixed-fleet mode (nsj-queue compat on|off); the pause flag is kept.
INSERT INTO {control_table} (id, compat_1_2_2, compat_alterado_em, compat_alterado_por)
VALUES (1, %(compat)s, now(), %(por)s)
ON CONFLICT (id) DO UPDATE
   SET compat_1_2_2 = EXCLUDED.compat_1_2_2, compat_alterado_em = EXCLUDED.compat_alterado_em,
       compat_alterado_por = EXCLUDED.compat_alterado_por

-- name: queue_compat_column_exists
-- Whether the control table has the mixed-fleet column (upgraded to this version).
SELECT EXISTS (SELECT 1
                 FROM pg_catalog.pg_attribute a
                 JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                WHERE c.relname = %(name)s
                  AND n.nspname = coalesce(%(schema)s, current_schema())
                  AND a.attname = 'compat_1_2_2' AND NOT a.attisdropped)

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
