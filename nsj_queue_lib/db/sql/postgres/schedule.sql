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

-- name: schedule_hint_set
-- The earliest next slot into the control row, where the workers read it with the pause
-- flag (scheduling/hint.py); NULL without schedules.  (No row yet: one with the defaults of
-- a queue without a row, mixed-fleet mode included.)
INSERT INTO {control_table} (id, agenda_proximo)
SELECT 1, min(proximo) FROM {schedule_table}
ON CONFLICT (id) DO UPDATE SET agenda_proximo = EXCLUDED.agenda_proximo
