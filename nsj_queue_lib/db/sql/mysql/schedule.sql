-- Periodic tasks, MySQL/MariaDB (the rest is in sql/common/schedule.sql).

-- name: schedule_upsert
-- `schedule add` of an existing name replaces its rule and starts it from its next slot.
INSERT INTO {schedule_table} (nome, processo, payload, cron, intervalo_segundos, fuso,
                              recuperar, prioridade, proximo, alterado_por)
VALUES (%(nome)s, %(processo)s, %(payload)s, %(cron)s, %(intervalo_segundos)s, %(fuso)s,
        %(recuperar)s, %(prioridade)s, %(proximo)s, %(por)s)
ON DUPLICATE KEY UPDATE
       processo = VALUES(processo), payload = VALUES(payload), cron = VALUES(cron),
       intervalo_segundos = VALUES(intervalo_segundos), fuso = VALUES(fuso),
       recuperar = VALUES(recuperar), prioridade = VALUES(prioridade),
       proximo = VALUES(proximo), alterado_por = VALUES(alterado_por)

-- name: schedule_hint_set
-- The earliest next slot into the control table's row id = 3 (alterado_em), where the
-- workers read it with the pause flag (scheduling/hint.py).
INSERT INTO {control_table} (id, pausada, motivo, alterado_em)
SELECT 3, FALSE, 'agenda', min(proximo) FROM {schedule_table} HAVING count(*) > 0
ON DUPLICATE KEY UPDATE alterado_em = VALUES(alterado_em)

-- name: schedule_hint_clear
-- Without schedules: no row id = 3.
DELETE FROM {control_table} WHERE id = 3 AND NOT EXISTS (SELECT 1 FROM {schedule_table})
