"""PostgreSQL behind a transaction pooler (DB_POOL_MODE=transaction): leases in the rows,
polling wake-ups (or LISTEN on a direct connection), lease rows for the admin jobs and HALT."""
