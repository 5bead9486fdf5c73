-- Periodic tasks (nsj_queue_lib/scheduling): the queue's schedules in {schedule_table}.
-- Same rules as queries.sql (named blocks, %(name)s parameters, DIALECT_WORDS).  Times
-- are written as aware UTC datetimes (MySQL columns hold UTC).

-- name: schedule_list
SELECT nome, processo, payload, cron, intervalo_segundos, fuso, recuperar, prioridade,
       proximo, ultimo_slot, ultima_tarefa, criado_em, alterado_por
  FROM {schedule_table}
 ORDER BY nome

-- name: schedule_get
SELECT nome, processo, payload, cron, intervalo_segundos, fuso, recuperar, prioridade,
       proximo, ultimo_slot, ultima_tarefa, criado_em, alterado_por
  FROM {schedule_table}
 WHERE nome = %(nome)s

-- name: schedule_delete
DELETE FROM {schedule_table} WHERE nome = %(nome)s

-- name: schedule_now
SELECT {now}

-- name: schedule_poll
-- The workers' look, about once a second: the database's clock, the next slot of all
-- schedules and whether the queue is paused (a paused queue gets no slot task).
SELECT {now} AS agora,
       (SELECT min(proximo) FROM {schedule_table}) AS proximo,
       (SELECT pausada FROM {control_table} WHERE id = 1) AS pausada

-- name: schedule_due
SELECT nome, processo, payload, cron, intervalo_segundos, fuso, recuperar, prioridade,
       proximo
  FROM {schedule_table}
 WHERE proximo <= %(agora)s
 ORDER BY proximo, nome

-- name: schedule_advance
-- The only way a slot is taken: whoever moves `proximo` on from the value it read inserts
-- the slot's tasks, in this same transaction; another worker (which waits for this row
-- lock) then matches no row.
UPDATE {schedule_table}
   SET proximo = %(novo)s, ultimo_slot = coalesce(%(ultimo)s, ultimo_slot)
 WHERE nome = %(nome)s AND proximo = %(proximo)s

-- name: schedule_last_task
UPDATE {schedule_table} SET ultima_tarefa = %(id)s WHERE nome = %(nome)s

-- name: schedule_cancel_task
-- The task `schedule add` inserted for a first slot still to come, when the schedule is
-- replaced or removed before it.
UPDATE {table}
   SET status = 'cancelada', mensagem = %(mensagem)s
 WHERE id = %(id)s AND status IN ('pendente', 'agendada') AND data_hora > {now}

-- name: schedule_first_slot
UPDATE {schedule_table} SET ultimo_slot = %(slot)s, ultima_tarefa = %(id)s WHERE nome = %(nome)s
