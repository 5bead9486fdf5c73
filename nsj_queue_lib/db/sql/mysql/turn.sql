-- Named queries of the idle turn of MySQL native mode (engine/mysql/idle_turn.py): one idle
-- worker per queue holds the turn (a session named lock) and polls; the others wait for it
-- inside the server.  {{has_due}} is the idle probe (task_has_due), written in by the caller.

-- name: turn_wait
-- Not holding the turn: wait up to %(wait)s seconds for it, and read the HALT request in the
-- same statement, once the wait is over: the read depends on the derived table's column,
-- so it runs after GET_LOCK returned (a plain scalar subquery beside GET_LOCK is read
-- before the wait).  A worker granted the turn when its holder stopped on a HALT sees the
-- HALT at once, and stops in turn.  (LIMIT keeps the derived table from being merged,
-- which would call GET_LOCK twice.)  got: 1 = granted.
SELECT w.got,
       (SELECT alterado_em FROM {control_table} WHERE id = 2 AND w.got IS NOT NULL) AS halt_at
  FROM (SELECT GET_LOCK(%(turn)s, %(wait)s) AS got LIMIT 1) w

-- name: turn_wait_no_control
-- The same for a queue without a control table (created before 2.1: no HALT to read).
SELECT GET_LOCK(%(turn)s, %(wait)s) AS got, NULL AS halt_at

-- name: turn_probe
-- The holder's poll: is a task due?  If so the same statement hands the turn on (the
-- holder will claim it), so the next idle worker takes over polling at once.
-- 0 = nothing due; 1 or 2 = due, turn released.
SELECT CASE WHEN ({{has_due}}) THEN coalesce(RELEASE_LOCK(%(turn)s), 0) + 1 ELSE 0 END AS due,
       NULL AS halt_at

-- name: turn_probe_halt
-- The same, with the HALT request (read at most every HALT_CHECK seconds).
SELECT CASE WHEN ({{has_due}}) THEN coalesce(RELEASE_LOCK(%(turn)s), 0) + 1 ELSE 0 END AS due,
       (SELECT alterado_em FROM {control_table} WHERE id = 2) AS halt_at

-- name: turn_pause_columns
-- Added to the probe's columns for a queue with a control table: the pause flag, read in
-- the statement that hands the turn on, so the claim that follows needs no read of its own;
-- and the next schedule slot (row id = 3: scheduling/hint.py).
, (SELECT pausada FROM {control_table} WHERE id = 1) AS pausada,
  (SELECT motivo FROM {control_table} WHERE id = 1) AS motivo,
  (SELECT alterado_em FROM {control_table} WHERE id = 3) AS agenda

-- name: turn_probe_keep
-- The holder's poll while it backs off: the task it last announced could not be claimed (the
-- due rows are held by other workers' open transactions, such as a running batch), so a due
-- task keeps the turn here: the holder claims it itself and hands the turn on only if that
-- claim gets it, and the other idle workers stay waiting.  0 = nothing due; 1 = due.
SELECT CASE WHEN ({{has_due}}) THEN 1 ELSE 0 END AS due, NULL AS halt_at

-- name: turn_probe_keep_halt
-- The same, with the HALT request.
SELECT CASE WHEN ({{has_due}}) THEN 1 ELSE 0 END AS due,
       (SELECT alterado_em FROM {control_table} WHERE id = 2) AS halt_at

-- name: turn_release
SELECT RELEASE_LOCK(%(turn)s)
