-- Fila fila_teste (gerado por: python -m nsj_queue_lib.db_gen test fila_teste --mysql)
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

CREATE DATABASE IF NOT EXISTS `test`;

CREATE TABLE IF NOT EXISTS `test`.`fila_teste` (
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
    KEY `ix_fila_teste_claim` (status, prioridade DESC, data_hora, id),
    -- Next due time, the idle workers' has-due probe (index only), lost-notification check,
    -- promotion of 'agendada'.
    KEY `ix_fila_teste_due` (status, data_hora),
    -- Rescue of tasks whose worker died (status = 'processando' ORDER BY id).
    KEY `ix_fila_teste_running` (status, id),
    -- Purge (age).
    KEY `ix_fila_teste_data_hora` (data_hora),
    -- Task chains (attempts of one task: id = root OR id_inicial = root).
    KEY `ix_fila_teste_chain` (id_inicial),
    -- list_equivalent_task.
    KEY `ix_fila_teste_equivalent` (payload_hash, chave_externa),
    -- Monitoring: fan-out and dead letters.
    KEY `ix_fila_teste_publication` (publication_id),
    KEY `ix_fila_teste_live` (live_id),
    UNIQUE KEY `ix_fila_teste_unique` (chave_unica_ativa),
    KEY `ix_fila_teste_ordem` (chave_ordem, status)
) DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS `test`.`fila_teste_subscriber` (
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
    KEY `ix_fila_teste_sub` (processo, tenant, grupo_empresarial)
) DEFAULT CHARSET = utf8mb4;

-- Circuit breaker of each webhook endpoint (scheme://host:port), shared by the fleet.
CREATE TABLE IF NOT EXISTS `test`.`fila_teste_endpoints` (
    endpoint VARCHAR(300) NOT NULL PRIMARY KEY,
    falhas INT NOT NULL DEFAULT 0,
    aberto_ate DATETIME(6) NULL,
    pausa INT NOT NULL DEFAULT 0,
    sonda_ate DATETIME(6) NULL,
    ultimo_erro VARCHAR(500) NULL,
    alterado_em DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) DEFAULT CHARSET = utf8mb4;

-- Delivery log: one row per webhook attempt.
CREATE TABLE IF NOT EXISTS `test`.`fila_teste_entregas` (
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
    KEY `ix_fila_teste_delivery_sub` (subscriber_id, id),
    KEY `ix_fila_teste_delivery_chain` (id_inicial),
    KEY `ix_fila_teste_delivery_data_hora` (data_hora)
) DEFAULT CHARSET = utf8mb4;

-- Operator controls of the queue (nsj-queue pause/resume): at most one row, id = 1.
-- Workers read it before claiming (at most every half second) and stop claiming while
-- pausada is true; no row means not paused.
CREATE TABLE IF NOT EXISTS `test`.`fila_teste_controle` (
    id INT NOT NULL PRIMARY KEY,
    pausada BOOLEAN NOT NULL DEFAULT FALSE,
    motivo VARCHAR(500) NULL,
    alterado_por VARCHAR(150) NULL,
    alterado_em DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) DEFAULT CHARSET = utf8mb4;

-- The admin jobs' last run (rescue, purge, notify; one row each): `horario` is the slot
-- (a clock minute, UTC) it ran for.  Written under the job's admin lock; a worker that
-- reaches the job late (busy through the slot) skips it when its slot is already here.
CREATE TABLE IF NOT EXISTS `test`.`fila_teste_rotinas` (
    rotina VARCHAR(30) NOT NULL PRIMARY KEY,
    horario DATETIME NOT NULL,
    executado_em DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    executado_por VARCHAR(150) NULL
) DEFAULT CHARSET = utf8mb4;

-- Periodic tasks (nsj-queue schedule add): see sql/postgres/schema.sql.  Times in UTC.
CREATE TABLE IF NOT EXISTS `test`.`fila_teste_agenda` (
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
CREATE TABLE IF NOT EXISTS `test`.`fila_teste_limites` (
    processo VARCHAR(250) NOT NULL PRIMARY KEY,
    maximo INT NOT NULL,
    alterado_por VARCHAR(150) NULL,
    alterado_em DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) DEFAULT CHARSET = utf8mb4;

-- Schema version of this queue.
ALTER TABLE `test`.`fila_teste` COMMENT = 'nsj_queue_lib schema 9 (fd93ce5a4785)';

-- Monitoring views (portable SQL, one text for every dialect). A chain is a task's first
-- attempt plus its retries (they point to it
-- through id_inicial); its current state is the state of its last attempt. A dead-letter
-- chain is a chain of its own (dead = true) whose live_id is the id of the live chain that
-- exhausted its attempts. Publications (pub_sub) and each subscriber's task (publication_id,
-- subscriber_id) are chains too. The views read the whole table: query them for dashboards,
-- not in a loop. CREATE OR REPLACE: this block can be applied alone to an existing queue.
CREATE OR REPLACE VIEW `test`.`fila_teste_cadeias` AS
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
          FROM `test`.`fila_teste`
         GROUP BY coalesce(id_inicial, id)) c
  JOIN `test`.`fila_teste` u ON u.id = c.ultimo_id
  LEFT JOIN (SELECT live_id, min(id) AS morta_id, max(id) AS morta_ultimo_id
               FROM `test`.`fila_teste`
              WHERE dead AND live_id IS NOT NULL
              GROUP BY live_id) m ON m.live_id = c.id_inicial AND NOT u.dead
  LEFT JOIN `test`.`fila_teste` mu ON mu.id = m.morta_ultimo_id;

-- Chains per processo, tipo (tarefa, publicacao, assinatura, morta) and current status.
CREATE OR REPLACE VIEW `test`.`fila_teste_resumo` AS
SELECT processo,
       tipo,
       status,
       count(*) AS cadeias,
       sum(tentativas) AS tentativas,
       min(data_hora_inicial) AS mais_antiga,
       max(data_hora_ultima) AS mais_recente
  FROM `test`.`fila_teste_cadeias`
 GROUP BY processo, tipo, status;
