-- Periodic tasks, PostgreSQL (the rest is in sql/common/schedule.sql).

-- name: schedule_upsert
-- `schedule add` of an existing name replaces its rule and starts it from its next slot.
INSERT INTO {schedule_table} (nome, processo, payload, cron, intervalo_segundos, fuso,
                              recuperar, prioridade, proximo, alterado_por)
VALUES (%(nome)s, %(processo)s, %(payload)s, %(cron)s, %(intervalo_segundos)s, %(fuso)s,
        %(recuperar)s, %(prioridade)s, %(proximo)s, %(por)s)
ON CONFLICT (nome) DO UPDATE
   SET processo = EXCLUDED.processo, payload = EXCLUDED.payload, cron = EXCLUDED.cron,
       intervalo_segundos = EXCLUDED.intervalo_segundos, fuso = EXCLUDED.fuso,
       recuperar = EXCLUDED.recuperar, prioridade = EXCLUDED.prioridade,
       proximo = EXCLUDED.proximo, alterado_por = EXCLUDED.alterado_por
