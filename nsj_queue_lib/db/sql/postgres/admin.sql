-- Named queries of the operator's commands (nsj_queue_lib.admin.QueueAdmin) and of the
-- workers' pause check (PostgreSQL).  Same names and parameters as the MySQL file.
-- {table} and {control_table} are identifiers rendered once; values are %(name)s parameters.
-- A chain is a task's first attempt (its "root") and its retries (id_inicial = root);
-- its current state is its one attempt not re-queued (NOT reenfileirado).
-- Blocks whose text is the same in every dialect live in sql/common/admin.sql.

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
