-- Fila {fila} (gerado por: python -m nsj_queue_lib.db_gen {schema} {fila} --mysql)
-- MySQL / MariaDB / SingleStore dialect: the "schema" is a MySQL database.
--
-- Times are DATETIME(6) in UTC. The library always writes UTC_TIMESTAMP(6) (microsecond
-- precision: a task inserted "now" is due at once) and its connections use time_zone
-- '+00:00'; the DEFAULTs below are UTC only on sessions with that time_zone.
-- No trigger, no NOTIFY, no foreign key, no partial or expression index. MySQL >= 8.0 and
-- MariaDB >= 10.6 run in native mode: the claim is FOR UPDATE SKIP LOCKED on ix_claim plus a
-- session named lock (GET_LOCK) per task, and idle workers poll an index-only probe on
-- ix_due. SingleStore (no SKIP LOCKED, no GET_LOCK) needs the queue server
-- (CLIENT_SERVER_MODE=true), which wakes the workers and holds the locks.
-- Verified on MariaDB 10.11. Not tried on SingleStore nor MySQL 8 (neither was available):
-- SingleStore may need a table type (ROWSTORE/COLUMNSTORE) or SHARD KEY choice, and may
-- ignore "prioridade DESC" in an index.

CREATE DATABASE IF NOT EXISTS `{schema}`;

CREATE TABLE IF NOT EXISTS {table} (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    id_inicial BIGINT NULL,
    data_hora_inicial DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    data_hora DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    origem VARCHAR(150) NULL,
    destino VARCHAR(150) NULL,
    processo VARCHAR(250) NULL,
    chave_externa VARCHAR(100) NULL,
    proxima_tentativa DATETIME(6) NULL,
    tentativa INT NOT NULL DEFAULT 1,
    status VARCHAR(100) NOT NULL DEFAULT 'pendente',
    reenfileirado BOOLEAN NOT NULL DEFAULT FALSE,
    estouro_tentativas BOOLEAN NOT NULL DEFAULT FALSE,
    mensagem VARCHAR(500) NULL,
    id_anterior BIGINT NULL,
    data_hora_anterior DATETIME(6) NULL,
    status_anterior VARCHAR(100) NULL,
    mensagem_anterior VARCHAR(500) NULL,
    payload LONGTEXT NULL,
    tenant BIGINT NULL,
    grupo_empresarial VARCHAR(40) NULL,
    payload_hash VARCHAR(64) NULL,
    pub_sub BOOLEAN NOT NULL DEFAULT FALSE,
    publication_id BIGINT NULL,
    subscriber_id VARCHAR(100) NULL,
    dead BOOLEAN NOT NULL DEFAULT FALSE,
    live_id BIGINT NULL,
    prioridade INT NOT NULL DEFAULT 50,
    chave_unica VARCHAR(250) NULL,
    -- Unique tasks: the key while the task is unfinished, NULL after (MySQL has no partial
    -- index; a unique index ignores NULLs).  See sql/postgres/schema.sql.
    chave_unica_ativa VARCHAR(250) AS (CASE WHEN status IN ('pendente', 'agendada',
        'processando') THEN chave_unica END) STORED,
    -- Ordered execution (insert_task(ordering_key=...)): see sql/postgres/schema.sql; the
    -- control table's row id = 5 (pausada = TRUE) says a producer used it.
    chave_ordem VARCHAR(250) NULL,
    -- Claim (native SKIP LOCKED and client/server candidates): one index range per waiting
    -- status, already in claim order.
    KEY {ix_claim} (status, prioridade DESC, data_hora, id),
    -- Next due time, the idle workers' has-due probe (index only), lost-notification check,
    -- promotion of 'agendada'.
    KEY {ix_due} (status, data_hora),
    -- Rescue of tasks whose worker died (status = 'processando' ORDER BY id).
    KEY {ix_running} (status, id),
    -- Purge (age).
    KEY {ix_data_hora} (data_hora),
    -- Task chains (attempts of one task: id = root OR id_inicial = root).
    KEY {ix_chain} (id_inicial),
    -- list_equivalent_task.
    KEY {ix_equivalent} (payload_hash, chave_externa),
    -- Monitoring: fan-out and dead letters.
    KEY {ix_publication} (publication_id),
    KEY {ix_live} (live_id),
    UNIQUE KEY {ix_unique} (chave_unica_ativa),
    KEY {ix_ordem} (chave_ordem, status)
) DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS {sub_table} (
    id VARCHAR(100) NOT NULL PRIMARY KEY,
    tenant BIGINT NULL,
    grupo_empresarial VARCHAR(40) NULL,
    processo VARCHAR(250) NOT NULL,
    url VARCHAR(2048) NULL,
    http_method VARCHAR(8) NULL,
    headers JSON NULL,
    ativo BOOLEAN NOT NULL DEFAULT TRUE,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    -- Webhook signing secrets (see the PostgreSQL schema): clear whsec_... or
    -- enc:fernet:<token>; the previous one signs beside it until segredo_anterior_expira.
    segredo VARCHAR(500) NULL,
    segredo_anterior VARCHAR(500) NULL,
    segredo_anterior_expira DATETIME(6) NULL,
    KEY {ix_sub} (processo, tenant, grupo_empresarial)
) DEFAULT CHARSET = utf8mb4;

-- Circuit breaker of each webhook endpoint (scheme://host:port), shared by the fleet.
CREATE TABLE IF NOT EXISTS {endpoint_table} (
    endpoint VARCHAR(300) NOT NULL PRIMARY KEY,
    falhas INT NOT NULL DEFAULT 0,
    aberto_ate DATETIME(6) NULL,
    pausa INT NOT NULL DEFAULT 0,
    sonda_ate DATETIME(6) NULL,
    ultimo_erro VARCHAR(500) NULL,
    alterado_em DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) DEFAULT CHARSET = utf8mb4;

-- Delivery log: one row per webhook attempt.
CREATE TABLE IF NOT EXISTS {delivery_table} (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    tarefa_id BIGINT NOT NULL,
    id_inicial BIGINT NOT NULL,
    subscriber_id VARCHAR(100) NOT NULL,
    endpoint VARCHAR(300) NULL,
    tentativa INT NOT NULL,
    sucesso BOOLEAN NOT NULL,
    status_http INT NULL,
    duracao_ms INT NULL,
    resposta VARCHAR(600) NULL,
    erro VARCHAR(500) NULL,
    data_hora DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY {ix_delivery_sub} (subscriber_id, id),
    KEY {ix_delivery_chain} (id_inicial),
    KEY {ix_delivery_data_hora} (data_hora)
) DEFAULT CHARSET = utf8mb4;

-- Operator controls of the queue (nsj-queue pause/resume): at most one row, id = 1.
-- Workers read it before claiming (at most every half second) and stop claiming while
-- pausada is true; no row means not paused.
CREATE TABLE IF NOT EXISTS {control_table} (
    id INT NOT NULL PRIMARY KEY,
    pausada BOOLEAN NOT NULL DEFAULT FALSE,
    motivo VARCHAR(500) NULL,
    alterado_por VARCHAR(150) NULL,
    alterado_em DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) DEFAULT CHARSET = utf8mb4;

-- The admin jobs' last run (rescue, purge, notify; one row each): `horario` is the slot
-- (a clock minute, UTC) it ran for.  Written under the job's admin lock; a worker that
-- reaches the job late (busy through the slot) skips it when its slot is already here.
CREATE TABLE IF NOT EXISTS {admin_table} (
    rotina VARCHAR(30) NOT NULL PRIMARY KEY,
    horario DATETIME NOT NULL,
    executado_em DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    executado_por VARCHAR(150) NULL
) DEFAULT CHARSET = utf8mb4;

-- Periodic tasks (nsj-queue schedule add): see sql/postgres/schema.sql.  Times in UTC.
CREATE TABLE IF NOT EXISTS {schedule_table} (
    nome VARCHAR(100) NOT NULL PRIMARY KEY,
    processo VARCHAR(250) NOT NULL,
    payload LONGTEXT NULL,
    cron VARCHAR(200) NULL,
    intervalo_segundos INT NULL,
    fuso VARCHAR(64) NOT NULL DEFAULT 'UTC',
    recuperar INT NOT NULL DEFAULT 1,
    prioridade INT NULL,
    proximo DATETIME(6) NOT NULL,
    ultimo_slot DATETIME(6) NULL,
    ultima_tarefa BIGINT NULL,
    criado_em DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    alterado_por VARCHAR(150) NULL
) DEFAULT CHARSET = utf8mb4;

-- Concurrency limits (nsj-queue limit set): see sql/postgres/schema.sql.  The workers
-- learn that the queue has limits from the control table's row id = 4 (pausada = TRUE).
CREATE TABLE IF NOT EXISTS {limit_table} (
    processo VARCHAR(250) NOT NULL PRIMARY KEY,
    maximo INT NOT NULL,
    alterado_por VARCHAR(150) NULL,
    alterado_em DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) DEFAULT CHARSET = utf8mb4;

-- Schema version of this queue.
ALTER TABLE {table} COMMENT = '{version_comment}';
