"""The database: connections and transactions (session), the named SQL of each dialect
(queries, sql/), the queue's schema and its upgrades (schema), what the connected
server offers (dialect, server_version, pooler), the queue's control row, and
`TaskRepository`, one method per named query.  No business rules here.
"""
