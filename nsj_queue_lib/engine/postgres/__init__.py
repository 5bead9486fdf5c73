"""PostgreSQL engine: the one-statement claim, LISTEN/NOTIFY with the listener turn,
session advisory locks."""
