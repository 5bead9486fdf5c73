-- Catalog reads of the schema lifecycle (db/schema.py: verify and upgrade), MySQL/MariaDB.
-- Every column is aliased: information_schema labels differ in case between servers.

-- name: catalog_tables
SELECT table_name AS name, table_type AS kind, table_comment AS comment
  FROM information_schema.tables
 WHERE table_schema = %(schema)s

-- name: catalog_columns
SELECT table_name AS table_name, column_name AS name, column_type AS type,
       is_nullable AS is_nullable, column_default AS default_expr, extra AS extra,
       generation_expression AS generated
  FROM information_schema.columns
 WHERE table_schema = %(schema)s
 ORDER BY table_name, ordinal_position

-- name: catalog_indexes
SELECT table_name AS table_name, index_name AS name, non_unique AS non_unique,
       seq_in_index AS seq, column_name AS column_name, collation AS collation,
       sub_part AS sub_part
  FROM information_schema.statistics
 WHERE table_schema = %(schema)s
 ORDER BY table_name, index_name, seq_in_index

-- name: catalog_views
SELECT table_name AS name, view_definition AS definition
  FROM information_schema.views
 WHERE table_schema = %(schema)s
