-- Fila fila_teste (gerado por: python -m nsj_queue_lib.db_gen public fila_teste)

CREATE TABLE IF NOT EXISTS "public"."fila_teste" (
    id bigserial NOT NULL PRIMARY KEY,
    id_inicial int8,
    data_hora_inicial timestamptz NOT NULL DEFAULT clock_timestamp(),
    data_hora timestamptz NOT NULL DEFAULT clock_timestamp(),
    origem varchar(150),
    destino varchar(150),
    processo varchar(250),
    chave_externa varchar(100),
    proxima_tentativa timestamptz,
    tentativa int NOT NULL DEFAULT 1,
    status varchar(100) NOT NULL DEFAULT 'pendente',
    reenfileirado boolean NOT NULL DEFAULT false,
    estouro_tentativas boolean NOT NULL DEFAULT false,
    mensagem varchar(500),
    id_anterior int8,
    data_hora_anterior timestamptz,
    status_anterior varchar(100),
    mensagem_anterior varchar(500),
    payload text,
    tenant int8,
    grupo_empresarial varchar(40),
    payload_hash varchar(64),
    pub_sub boolean NOT NULL DEFAULT false,
    publication_id int8,
    subscriber_id varchar(100),
    dead boolean NOT NULL DEFAULT false,
    live_id int8,
    prioridade int NOT NULL DEFAULT 50,
    chave_unica varchar(250)
);

-- Leases (schema 7, DB_POOL_MODE=transaction: engine/pooled/backend.py): the worker that runs
-- a 'processando' task and until when its lease lasts; NULL in session mode, whose task
-- locks live on the worker's session.  Added by ALTER so that `schema apply` on a queue of
-- an earlier version adds them too.
ALTER TABLE "public"."fila_teste"
    ADD COLUMN IF NOT EXISTS lease_dono varchar(150),
    ADD COLUMN IF NOT EXISTS lease_ate timestamptz;

-- Ordered execution (schema 9, insert_task(ordering_key=...); db/limits.py): tasks of one
-- key run one at a time in the order of their first attempt (coalesce(id_inicial, id));
-- retries carry it, dead letters do not.  The index serves the claim's check for an earlier
-- or running task of the key.
ALTER TABLE "public"."fila_teste"
    ADD COLUMN IF NOT EXISTS chave_ordem varchar(250);
CREATE INDEX IF NOT EXISTS "ix_fila_teste_ordem" ON "public"."fila_teste" (chave_ordem)
    WHERE chave_ordem IS NOT NULL AND status IN ('pendente', 'agendada', 'processando');

-- Storage settings for a queue's life cycle (each row is inserted, rewritten by the claim
-- and by the finish within seconds, then only read until the purge deletes it).  A separate
-- ALTER, so it also applies to an existing table (it affects only pages written later):
-- * fillfactor = 70: room on every page for the new versions the claim and the finish
--   write, so they usually stay on the row's page; page pruning then frees the old
--   versions without waiting for VACUUM, and the table and its claim index grow less.
-- * autovacuum_vacuum_scale_factor = 0.01 and _threshold = 1000: the default (20% of the
--   table) lets a big queue pile up dead versions that every claim steps over in the
--   claim index; here VACUUM starts after about 1% of the rows changed.
-- * autovacuum_vacuum_cost_delay = 1 (ms): VACUUM of this table is throttled less, so it
--   finishes before the next wave of dead versions (the default is 2 ms).
-- * autovacuum_analyze_scale_factor = 0.02: the status mix changes fast; fresher
--   statistics keep the planner on the partial indexes.
ALTER TABLE "public"."fila_teste" SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01,
                         autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 1,
                         autovacuum_analyze_scale_factor = 0.02);

-- Claim: due tasks by priority then age, over the active rows only.
CREATE INDEX IF NOT EXISTS "ix_fila_teste_claim" ON "public"."fila_teste" (prioridade DESC, data_hora, id)
    WHERE status IN ('pendente', 'agendada');
-- Next due time and lost-notification check.
CREATE INDEX IF NOT EXISTS "ix_fila_teste_due" ON "public"."fila_teste" (status, data_hora)
    WHERE status IN ('pendente', 'agendada');
-- Rescue of tasks whose worker died.
CREATE INDEX IF NOT EXISTS "ix_fila_teste_running" ON "public"."fila_teste" (id) WHERE status = 'processando';
-- Purge by age: BRIN is tiny and nearly free to maintain on an append-mostly table.
CREATE INDEX IF NOT EXISTS "ix_fila_teste_data_hora" ON "public"."fila_teste" USING brin (data_hora);
-- Attempts of one task (retries point to their first attempt).
CREATE INDEX IF NOT EXISTS "ix_fila_teste_chain" ON "public"."fila_teste" (id_inicial) WHERE id_inicial IS NOT NULL;
-- list_equivalent_task.
CREATE INDEX IF NOT EXISTS "ix_fila_teste_equivalent" ON "public"."fila_teste" (payload_hash, chave_externa);
-- Monitoring: fan-out and dead letters.
CREATE INDEX IF NOT EXISTS "ix_fila_teste_publication" ON "public"."fila_teste" (publication_id) WHERE publication_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS "ix_fila_teste_live" ON "public"."fila_teste" (live_id) WHERE live_id IS NOT NULL;
-- Unique tasks (insert_task(unique_key=...)): one unfinished task per key.  An attempt
-- that failed ('falha') leaves the index in the transaction that inserts its next attempt
-- (which carries the key), so the key follows the chain; finished statuses are outside.
CREATE UNIQUE INDEX IF NOT EXISTS "ix_fila_teste_unique" ON "public"."fila_teste" (chave_unica)
    WHERE chave_unica IS NOT NULL AND status IN ('pendente', 'agendada', 'processando');

CREATE TABLE IF NOT EXISTS "public"."fila_teste_subscriber" (
    id varchar(100) NOT NULL PRIMARY KEY,
    tenant int8,
    grupo_empresarial varchar(40),
    processo varchar(250) NOT NULL,
    url varchar(2048),
    http_method varchar(8),
    headers json,
    ativo boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS "ix_fila_teste_sub" ON "public"."fila_teste_subscriber" (processo, tenant, grupo_empresarial);

-- Webhook signing secrets (Standard Webhooks; nsj-queue subscriber add/rotate-secret):
-- `segredo` signs every delivery; after a rotation `segredo_anterior` signs beside it
-- until `segredo_anterior_expira`.  Clear text (whsec_...) or, with WEBHOOK_SECRETS_KEY,
-- enc:fernet:<token>.  Added by ALTER so that a queue of an earlier version gets them
-- too; a subscriber table without them (1.2.2's, QUEUE_SUBSCRIBER_TABLE) is unsigned.
ALTER TABLE "public"."fila_teste_subscriber"
    ADD COLUMN IF NOT EXISTS segredo varchar(500),
    ADD COLUMN IF NOT EXISTS segredo_anterior varchar(500),
    ADD COLUMN IF NOT EXISTS segredo_anterior_expira timestamptz;

-- Circuit breaker of each webhook endpoint (scheme://host:port), shared by the fleet:
-- `falhas` consecutive failures; while `aberto_ate` is in the future its deliveries wait
-- without spending attempts; then one probe (`sonda_ate`: its lease) closes it or doubles
-- `pausa` (seconds).
CREATE TABLE IF NOT EXISTS "public"."fila_teste_endpoints" (
    endpoint varchar(300) NOT NULL PRIMARY KEY,
    falhas int NOT NULL DEFAULT 0,
    aberto_ate timestamptz,
    pausa int NOT NULL DEFAULT 0,
    sonda_ate timestamptz,
    ultimo_erro varchar(500),
    alterado_em timestamptz NOT NULL DEFAULT now()
);

-- Delivery log: one row per webhook attempt (HTTP status, duration, start of the answer).
CREATE TABLE IF NOT EXISTS "public"."fila_teste_entregas" (
    id bigserial NOT NULL PRIMARY KEY,
    tarefa_id int8 NOT NULL,
    id_inicial int8 NOT NULL,
    subscriber_id varchar(100) NOT NULL,
    endpoint varchar(300),
    tentativa int NOT NULL,
    sucesso boolean NOT NULL,
    status_http int,
    duracao_ms int,
    resposta varchar(600),
    erro varchar(500),
    data_hora timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS "ix_fila_teste_delivery_sub" ON "public"."fila_teste_entregas" (subscriber_id, id);
CREATE INDEX IF NOT EXISTS "ix_fila_teste_delivery_chain" ON "public"."fila_teste_entregas" (id_inicial);
CREATE INDEX IF NOT EXISTS "ix_fila_teste_delivery_data_hora" ON "public"."fila_teste_entregas" USING brin (data_hora);

-- Operator controls of the queue (nsj-queue pause/resume): at most one row, id = 1.
-- Workers read it before claiming (at most every half second) and stop claiming while
-- pausada is true; no row means not paused.
CREATE TABLE IF NOT EXISTS "public"."fila_teste_controle" (
    id int NOT NULL PRIMARY KEY CHECK (id = 1),
    pausada boolean NOT NULL DEFAULT false,
    motivo varchar(500),
    alterado_por varchar(150),
    alterado_em timestamptz NOT NULL DEFAULT now()
);

-- Mixed-fleet mode (coordination/fleet_mode.py): while compat_1_2_2 is true, 1.2.2 workers
-- may share the queue and 2.x workers also hold 1.2.2's keys; no row means true.  Added
-- by ALTER so that `schema apply` on a queue of an earlier 2.x adds it too, as true.
ALTER TABLE "public"."fila_teste_controle"
    ADD COLUMN IF NOT EXISTS compat_1_2_2 boolean NOT NULL DEFAULT true,
    ADD COLUMN IF NOT EXISTS compat_alterado_em timestamptz,
    ADD COLUMN IF NOT EXISTS compat_alterado_por varchar(150),
    -- the earliest next slot of the queue's schedules (scheduling/hint.py)
    ADD COLUMN IF NOT EXISTS agenda_proximo timestamptz,
    -- the queue has concurrency limits (nsj-queue limit; db/limits.py): workers then claim
    -- with the limit-aware claim, else with the usual one
    ADD COLUMN IF NOT EXISTS limites boolean NOT NULL DEFAULT false,
    -- when a producer first inserted a task with an ordering key (NULL: never): workers
    -- then claim order-aware
    ADD COLUMN IF NOT EXISTS ordenacao_desde timestamptz;

-- A queue this DDL creates never had 1.2.2 workers: it starts out of mixed-fleet mode.
-- Only a new queue table has no version stamp yet (the COMMENT at the end writes it;
-- 1.2.2's table never has one, and `schema apply` fails on it before this point); and
-- `schema upgrade` never runs this statement (db/schema.py: a seed).
INSERT INTO "public"."fila_teste_controle" (id, compat_1_2_2, compat_alterado_em, compat_alterado_por)
SELECT 1, false, now(), 'nsj-queue schema'
 WHERE obj_description('"public"."fila_teste"'::regclass, 'pg_class') IS NULL
ON CONFLICT (id) DO NOTHING;

-- The admin jobs' last run (rescue, purge, notify; one row each): `horario` is the slot
-- (a clock minute, UTC) it ran for.  Written under the job's admin lock; a worker that
-- reaches the job late (busy through the slot) skips it when its slot is already here.
CREATE TABLE IF NOT EXISTS "public"."fila_teste_rotinas" (
    rotina varchar(30) NOT NULL PRIMARY KEY,
    horario timestamp NOT NULL,
    executado_em timestamptz NOT NULL DEFAULT now(),
    executado_por varchar(150)
);

-- Periodic tasks (nsj-queue schedule add): one row per schedule.  `proximo` is the next
-- slot not yet run (UTC); the worker that moves it forward (a conditional UPDATE, in the
-- transaction that inserts the slot's task) is the only one that inserts that task.
CREATE TABLE IF NOT EXISTS "public"."fila_teste_agenda" (
    nome varchar(100) NOT NULL PRIMARY KEY,
    processo varchar(250) NOT NULL,
    payload text,
    cron varchar(200),
    intervalo_segundos int,
    fuso varchar(64) NOT NULL DEFAULT 'UTC',
    recuperar int NOT NULL DEFAULT 1,
    prioridade int,
    proximo timestamptz NOT NULL,
    ultimo_slot timestamptz,
    ultima_tarefa int8,
    criado_em timestamptz NOT NULL DEFAULT now(),
    alterado_por varchar(150)
);

-- Concurrency limits (nsj-queue limit set): at most `maximo` tasks of `processo` run at
-- once across the fleet.  Each running task of a limited processo holds one of its
-- `maximo` slot locks (session advisory locks, db/limits.py) from its claim to its end.
CREATE TABLE IF NOT EXISTS "public"."fila_teste_limites" (
    processo varchar(250) NOT NULL PRIMARY KEY,
    maximo int NOT NULL CHECK (maximo > 0),
    alterado_por varchar(150),
    alterado_em timestamptz NOT NULL DEFAULT now()
);

-- Wakes the workers (LISTEN "fila_teste") when a task is inserted: a task due now is claimed,
-- and a future one (scheduled or a retry) makes idle workers re-arm their timer to its time.
CREATE OR REPLACE FUNCTION "public"."notify_fila_teste_insert"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('fila_teste', '');
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER "trigger_insert_fila_teste" AFTER INSERT ON "public"."fila_teste"
    FOR EACH ROW
    WHEN (NEW.status IN ('pendente', 'agendada'))
    EXECUTE FUNCTION "public"."notify_fila_teste_insert"();

-- Schema version of this queue (read by verify/upgrade: python -m nsj_queue_lib.db_gen --verify).
COMMENT ON TABLE "public"."fila_teste" IS 'nsj_queue_lib schema 9 (09f4330b4bd1)';

-- Monitoring views (portable SQL, one text for every dialect). A chain is a task's first
-- attempt plus its retries (they point to it
-- through id_inicial); its current state is the state of its last attempt. A dead-letter
-- chain is a chain of its own (dead = true) whose live_id is the id of the live chain that
-- exhausted its attempts. Publications (pub_sub) and each subscriber's task (publication_id,
-- subscriber_id) are chains too. The views read the whole table: query them for dashboards,
-- not in a loop. CREATE OR REPLACE: this block can be applied alone to an existing queue.
CREATE OR REPLACE VIEW "public"."fila_teste_cadeias" AS
SELECT c.id_inicial,
       u.id AS ultimo_id,
       CASE WHEN u.dead THEN 'morta'
            WHEN u.pub_sub THEN 'publicacao'
            WHEN u.publication_id IS NOT NULL THEN 'assinatura'
            ELSE 'tarefa' END AS tipo,
       u.processo,
       u.origem,
       u.destino,
       u.chave_externa,
       u.tenant,
       u.grupo_empresarial,
       u.prioridade,
       u.status,
       c.tentativas,
       u.estouro_tentativas,
       u.mensagem,
       u.data_hora_inicial,
       u.data_hora AS data_hora_ultima,
       u.publication_id,
       u.subscriber_id,
       u.dead,
       u.live_id,
       (m.morta_id IS NOT NULL) AS enviada_fila_mortos,
       m.morta_id,
       mu.status AS morta_status,
       mu.tentativa AS morta_tentativas,
       mu.mensagem AS morta_mensagem
  FROM (SELECT coalesce(id_inicial, id) AS id_inicial, count(*) AS tentativas,
               max(id) AS ultimo_id
          FROM "public"."fila_teste"
         GROUP BY coalesce(id_inicial, id)) c
  JOIN "public"."fila_teste" u ON u.id = c.ultimo_id
  LEFT JOIN (SELECT live_id, min(id) AS morta_id, max(id) AS morta_ultimo_id
               FROM "public"."fila_teste"
              WHERE dead AND live_id IS NOT NULL
              GROUP BY live_id) m ON m.live_id = c.id_inicial AND NOT u.dead
  LEFT JOIN "public"."fila_teste" mu ON mu.id = m.morta_ultimo_id;

-- Chains per processo, tipo (tarefa, publicacao, assinatura, morta) and current status.
CREATE OR REPLACE VIEW "public"."fila_teste_resumo" AS
SELECT processo,
       tipo,
       status,
       count(*) AS cadeias,
       sum(tentativas) AS tentativas,
       min(data_hora_inicial) AS mais_antiga,
       max(data_hora_ultima) AS mais_recente
  FROM "public"."fila_teste_cadeias"
 GROUP BY processo, tipo, status;
