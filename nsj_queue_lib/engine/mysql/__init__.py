"""MySQL native engine (MySQL >= 8.0, MariaDB >= 10.6): SKIP LOCKED claim, GET_LOCK
session locks, the idle turn instead of LISTEN."""
