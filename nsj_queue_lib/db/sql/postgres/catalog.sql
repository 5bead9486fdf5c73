-- Catalog reads of the schema lifecycle (db/schema.py: verify and upgrade).
-- Run with search_path = '' so every definition names its schema, which the caller
-- then replaces by a placeholder: a scratch copy and the real queue compare equal.

-- name: catalog_relations
SELECT c.relname AS name, c.relkind AS kind, c.reloptions AS options,
       obj_description(c.oid, 'pg_class') AS comment
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s
   AND c.relkind IN ('r', 'p', 'v', 'm')
   AND (%(all)s OR c.relname = ANY(%(names)s))

-- name: catalog_columns
SELECT c.relname AS table_name, a.attname AS name,
       format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
       pg_get_expr(d.adbin, d.adrelid) AS default_expr
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE n.nspname = %(schema)s
   AND c.relkind IN ('r', 'p')
   AND c.relname = ANY(%(names)s)
   AND a.attnum > 0
   AND NOT a.attisdropped
 ORDER BY c.relname, a.attnum

-- name: catalog_indexes
SELECT i.relname AS name, t.relname AS table_name, pg_get_indexdef(i.oid) AS definition,
       x.indisvalid AS valid, x.indisprimary AS is_primary
  FROM pg_index x
  JOIN pg_class i ON i.oid = x.indexrelid
  JOIN pg_class t ON t.oid = x.indrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace
 WHERE n.nspname = %(schema)s
   AND t.relname = ANY(%(names)s)

-- name: catalog_triggers
SELECT g.tgname AS name, c.relname AS table_name, pg_get_triggerdef(g.oid) AS definition
  FROM pg_trigger g
  JOIN pg_class c ON c.oid = g.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s
   AND c.relname = ANY(%(names)s)
   AND NOT g.tgisinternal

-- name: catalog_functions
SELECT p.proname AS name, pg_get_functiondef(p.oid) AS definition
  FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = %(schema)s
   AND (%(all)s OR p.proname = ANY(%(names)s))

-- name: catalog_views
SELECT c.relname AS name, pg_get_viewdef(c.oid) AS definition
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s
   AND c.relkind IN ('v', 'm')
   AND c.relname = ANY(%(names)s)

-- name: catalog_quote_ident
SELECT quote_ident(%(name)s) AS quoted

-- name: catalog_tarefa_types
-- The type of each column of a queue table (%(table)s: its quoted name), read once per
-- worker session: the per-task claim returns its row as one JSON value only when every
-- column's JSON form maps back exactly (db/claimed_row.py).
SELECT a.attname AS name, a.atttypid::regtype::text AS type
  FROM pg_attribute a
 WHERE a.attrelid = %(table)s::regclass
   AND a.attnum > 0
   AND NOT a.attisdropped
