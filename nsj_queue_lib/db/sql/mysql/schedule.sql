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
