-- Webhook subscriptions, circuit breakers and delivery log (pubsub/webhook_store.py).
-- Values are always parameters; {sub_table}, {endpoint_table}, {delivery_table} are the
-- queue's validated, quoted names.

-- name: webhook_probe_secrets
-- Whether the subscriber table has the signing columns (1.2.2's does not).
SELECT segredo, segredo_anterior, segredo_anterior_expira FROM {sub_table} WHERE 1 = 0

-- name: webhook_probe_endpoints
SELECT endpoint FROM {endpoint_table} WHERE 1 = 0

-- name: webhook_probe_deliveries
SELECT id FROM {delivery_table} WHERE 1 = 0

-- name: subscriber_secrets_get
-- The stored secrets of one subscription; the previous one only while its overlap lasts.
SELECT segredo,
       CASE WHEN segredo_anterior_expira > {now} THEN segredo_anterior END AS segredo_anterior
  FROM {sub_table}
 WHERE id = %(id)s

-- name: subscriber_exists
SELECT id FROM {sub_table} WHERE id = %(id)s

-- name: subscriber_unsigned_list
-- Active webhook subscriptions without a secret (warned about at worker start).
SELECT id FROM {sub_table}
 WHERE ativo AND url IS NOT NULL AND segredo IS NULL
 ORDER BY id
 LIMIT 20

-- name: subscriber_list
SELECT id, tenant, grupo_empresarial, processo, url, http_method, headers, ativo, created_at
  FROM {sub_table}
 ORDER BY id

-- name: subscriber_list_signing
SELECT id, segredo IS NOT NULL AS assinada,
       CASE WHEN segredo_anterior_expira > {now} THEN segredo_anterior_expira END
           AS segredo_anterior_expira
  FROM {sub_table}

-- name: subscriber_insert
INSERT INTO {sub_table} (id, tenant, grupo_empresarial, processo, url, http_method, headers,
                         ativo)
VALUES (%(id)s, %(tenant)s, %(grupo_empresarial)s, %(processo)s, %(url)s, %(http_method)s,
        %(headers)s, TRUE)

-- name: subscriber_secret_set
UPDATE {sub_table}
   SET segredo = %(segredo)s, segredo_anterior = %(segredo_anterior)s
 WHERE id = %(id)s

-- name: subscriber_secret_rotate
-- The current secret becomes the previous one, signing beside the new one for %(delay)s s.
UPDATE {sub_table}
   SET segredo_anterior = segredo,
       segredo_anterior_expira = CASE WHEN segredo IS NULL THEN NULL ELSE {delay_from_now} END,
       segredo = %(segredo)s
 WHERE id = %(id)s

-- name: subscriber_secret_rows
SELECT id, segredo, segredo_anterior FROM {sub_table}
 WHERE segredo IS NOT NULL OR segredo_anterior IS NOT NULL
 ORDER BY id

-- name: subscriber_header_rows
-- Subscriptions with headers (subscriber reencrypt seals their values).
SELECT id, headers FROM {sub_table} WHERE headers IS NOT NULL ORDER BY id

-- name: subscriber_headers_set
UPDATE {sub_table} SET headers = %(headers)s WHERE id = %(id)s

-- name: subscriber_set_active
UPDATE {sub_table} SET ativo = %(ativo)s WHERE id = %(id)s

-- name: subscriber_delete
DELETE FROM {sub_table} WHERE id = %(id)s

-- name: endpoint_reset
-- A success after failures (or a probe that went through) closes the breaker.
UPDATE {endpoint_table}
   SET falhas = 0, aberto_ate = NULL, pausa = 0, sonda_ate = NULL, alterado_em = {now}
 WHERE endpoint = %(endpoint)s

-- name: endpoint_probe_lease
-- The probe's lease: %(delay)s s (the webhook timeout and a margin), committed before its
-- HTTP call, so one probe per pause runs fleet-wide; its outcome clears it (endpoint_reset,
-- endpoint_probe_failed, endpoint_probe_release), or it lapses (the probing worker died).
UPDATE {endpoint_table} SET sonda_ate = {delay_from_now} WHERE endpoint = %(endpoint)s

-- name: endpoint_probe_release
-- A probe that made no call (the request could not be made, or the delivery stopped
-- before it) gives its lease back.
UPDATE {endpoint_table} SET sonda_ate = NULL WHERE endpoint = %(endpoint)s

-- name: endpoint_deferral_until
-- Until when the endpoint's deliveries wait: the end of its pause, or, while a probe holds
-- the lease, the lease's end but at most %(delay)s s from now; NULL: they need not wait.
SELECT CASE WHEN aberto_ate > {now} THEN aberto_ate
            WHEN sonda_ate > {now} THEN least(sonda_ate, {delay_from_now}) END AS ate
  FROM {endpoint_table}
 WHERE endpoint = %(endpoint)s

-- name: endpoint_waiting_locked
-- The endpoint's waiting deliveries (of its subscriptions %(ids)s, one parameter per id)
-- due before %(ate)s, at most %(limit)s, locked for endpoint_defer_locked; rows another
-- transaction holds (a claim under way) are skipped: such a delivery defers itself.
SELECT id FROM {table}
 WHERE status IN ('pendente', 'agendada') AND data_hora < %(ate)s
   AND subscriber_id IN %(ids)s AND NOT dead
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: endpoint_defer_locked
-- ...put back to %(ate)s in the same transaction, without spending attempts, so that they
-- are not claimed one by one while the breaker is open or a probe is under way.
UPDATE {table}
   SET status = 'agendada', data_hora = %(ate)s, mensagem = %(mensagem)s
 WHERE id IN %(locked)s AND status IN ('pendente', 'agendada')

-- name: subscriber_urls
-- Subscriptions and their URLs (the endpoint of each, computed in Python), at most %(limit)s.
SELECT id, url FROM {sub_table} WHERE url IS NOT NULL ORDER BY id LIMIT %(limit)s

-- name: endpoint_list
-- Every endpoint's breaker, those not closed first, then by failures (bounded by
-- %(limit)s: the listing says when it was cut).
SELECT endpoint, falhas, aberto_ate, pausa, ultimo_erro, alterado_em,
       CASE WHEN aberto_ate IS NULL THEN 'fechado'
            WHEN aberto_ate > {now} THEN 'aberto'
            ELSE 'meio-aberto' END AS estado
  FROM {endpoint_table}
 ORDER BY CASE WHEN aberto_ate IS NULL THEN 1 ELSE 0 END, falhas DESC, endpoint
 LIMIT %(limit)s

-- name: endpoint_list_troubled
-- Endpoints failing or with the breaker not closed, the open ones first (status, metrics,
-- dashboard: bounded by %(limit)s).
SELECT endpoint, falhas, aberto_ate, pausa, alterado_em,
       CASE WHEN aberto_ate IS NULL THEN 'fechado'
            WHEN aberto_ate > {now} THEN 'aberto'
            ELSE 'meio-aberto' END AS estado
  FROM {endpoint_table}
 WHERE falhas > 0 OR aberto_ate IS NOT NULL
 ORDER BY CASE WHEN aberto_ate IS NULL THEN 1 ELSE 0 END, falhas DESC, endpoint
 LIMIT %(limit)s

-- name: endpoint_count_open
SELECT count(*) FROM {endpoint_table} WHERE aberto_ate IS NOT NULL

-- name: delivery_insert
INSERT INTO {delivery_table} (tarefa_id, id_inicial, subscriber_id, endpoint, tentativa,
                              sucesso, status_http, duracao_ms, resposta, erro)
VALUES (%(tarefa_id)s, %(id_inicial)s, %(subscriber_id)s, %(endpoint)s, %(tentativa)s,
        %(sucesso)s, %(status_http)s, %(duracao_ms)s, %(resposta)s, %(erro)s)

-- name: delivery_list
SELECT id, tarefa_id, id_inicial, subscriber_id, endpoint, tentativa, sucesso, status_http,
       duracao_ms, resposta, erro, data_hora
  FROM {delivery_table}
 WHERE subscriber_id = %(subscriber_id)s
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: delivery_get
SELECT id, tarefa_id, id_inicial, subscriber_id, endpoint, tentativa, sucesso, status_http,
       duracao_ms, resposta, erro, data_hora
  FROM {delivery_table}
 WHERE id = %(id)s

-- name: task_insert_redelivery
-- A new first attempt of a delivery's chain (same id_inicial, so the same webhook-id),
-- due now; its payload is resolved from the chain's first attempt like a retry's.
INSERT INTO {table} (id_inicial, data_hora_inicial, origem, destino, processo,
                     chave_externa, tentativa, status, mensagem_anterior, tenant,
                     grupo_empresarial, payload_hash, pub_sub, publication_id, subscriber_id,
                     dead, prioridade)
SELECT coalesce(t.id_inicial, t.id), t.data_hora_inicial, t.origem, t.destino, t.processo,
       t.chave_externa, 1, 'pendente', %(mensagem)s, t.tenant, t.grupo_empresarial,
       t.payload_hash, FALSE, t.publication_id, t.subscriber_id, FALSE, t.prioridade
  FROM {table} t
 WHERE t.id = %(id)s AND t.subscriber_id IS NOT NULL AND NOT t.dead
{returning_id}

-- name: endpoint_take_probe
-- The probe of a half-open breaker, or the call alone to a closed one with %(falhas)s
-- failures (one more opens it), on a connection of its own (pubsub/delivery.py): the
-- endpoint's row when no probe holds the lease, locked without waiting (a row another
-- transaction holds is skipped: the caller does not become the probe); then
-- endpoint_probe_lease and its commit, before the HTTP call.
SELECT endpoint FROM {endpoint_table}
 WHERE endpoint = %(endpoint)s
   AND (aberto_ate <= {now} OR (aberto_ate IS NULL AND falhas >= %(falhas)s))
   AND (sonda_ate IS NULL OR sonda_ate <= {now})
   FOR UPDATE SKIP LOCKED
