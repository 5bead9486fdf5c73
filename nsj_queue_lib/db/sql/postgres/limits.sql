-- Concurrency limits, PostgreSQL (the rest is in sql/common/limits.sql).

-- name: limit_upsert
INSERT INTO {limit_table} (processo, maximo, alterado_por, alterado_em)
VALUES (%(processo)s, %(maximo)s, %(por)s, now())
ON CONFLICT (processo) DO UPDATE
   SET maximo = EXCLUDED.maximo, alterado_por = EXCLUDED.alterado_por,
       alterado_em = EXCLUDED.alterado_em

-- name: limit_flag_set
-- The control row's `limites`: whether the queue has limits (read by the workers with the
-- pause flag, runtime/pause.py), written with every change of the limits.
INSERT INTO {control_table} (id, limites)
VALUES (1, EXISTS (SELECT 1 FROM {limit_table}))
ON CONFLICT (id) DO UPDATE SET limites = EXCLUDED.limites

-- name: limit_pick
-- The limit-aware claim (in its own transaction): the next due task, row-locked, in claim
-- order, of a processo not in %(blocked)s (the limited ones found full by this claim).
SELECT c.id, c.processo
  FROM {table} c
 WHERE c.status IN ('pendente', 'agendada') AND c.data_hora <= now()
   AND (c.processo IS NULL OR c.processo <> ALL(%(blocked)s::varchar[]))
 ORDER BY c.prioridade DESC, c.data_hora, c.id
 LIMIT 1
   FOR UPDATE SKIP LOCKED

-- name: limit_slot_take
-- One free slot of a limited processo: the first of the keys %(keys)s (its slots this
-- session does not hold yet) whose session advisory lock is free, taken; no row: all
-- taken.  The lazy scan stops at the first lock obtained.
SELECT s.k
  FROM unnest(%(keys)s::int4[]) WITH ORDINALITY AS s(k, n)
 WHERE pg_try_advisory_lock(%(ns)s::int4, s.k)
 LIMIT 1

-- name: limit_slot_release
SELECT pg_advisory_unlock(%(ns)s::int4, %(k)s::int4)

-- name: limit_mark
-- The picked row (locked by limit_pick) to 'processando' with its task lock (the same
-- session advisory lock as task_claim_locked's), in the claim's transaction.
UPDATE {table} t
   SET status = 'processando'
 WHERE t.id = %(id)s AND t.status IN ('pendente', 'agendada')
   AND pg_try_advisory_lock(%(lock_ns)s,
         ((t.id & 4294967295) - CASE WHEN (t.id & 4294967295) >= 2147483648
                                     THEN 4294967296 ELSE 0 END)::int4)
RETURNING {tarefa_cols}

-- name: limit_mark_batch
-- limit_mark in batch mode: no session lock (nothing of the batch is visible before its
-- commit), the transaction-level lock task_claim_batch takes.
UPDATE {table} t
   SET status = 'processando'
 WHERE t.id = %(id)s AND t.status IN ('pendente', 'agendada')
   AND pg_try_advisory_xact_lock(%(lock_ns)s,
         ((t.id & 4294967295) - CASE WHEN (t.id & 4294967295) >= 2147483648
                                     THEN 4294967296 ELSE 0 END)::int4)
RETURNING {tarefa_cols}

-- name: limit_pick_ordered
-- limit_pick once a producer used ordering keys: a task whose key has a running task, or a
-- waiting one first inserted before it (its chain's root id: a retry keeps its place), is
-- not taken.  Read with the statement's snapshot: an earlier task of the key is always
-- seen waiting or running until its success (or dead letter) commits.
SELECT c.id, c.processo
  FROM {table} c
 WHERE c.status IN ('pendente', 'agendada') AND c.data_hora <= now()
   AND (c.processo IS NULL OR c.processo <> ALL(%(blocked)s::varchar[]))
   AND (c.chave_ordem IS NULL OR NOT EXISTS (
        SELECT 1 FROM {table} o
         WHERE o.chave_ordem = c.chave_ordem AND o.id <> c.id
           AND o.status IN ('pendente', 'agendada', 'processando')
           AND (o.status = 'processando'
                OR coalesce(o.id_inicial, o.id) < coalesce(c.id_inicial, c.id))))
 ORDER BY c.prioridade DESC, c.data_hora, c.id
 LIMIT 1
   FOR UPDATE SKIP LOCKED

-- name: order_state
-- Ordered insert: the mixed-fleet mode (refused) and when ordering keys were first used.
SELECT coalesce((SELECT compat_1_2_2 FROM {control_table} WHERE id = 1), TRUE) AS misto,
       (SELECT (to_jsonb(c) ->> 'ordenacao_desde')::timestamptz
          FROM {control_table} c WHERE c.id = 1) AS desde

-- name: order_flag_set
-- The first ordered insert of the queue, in the producer's transaction.
UPDATE {control_table} SET ordenacao_desde = now()
 WHERE id = 1 AND ordenacao_desde IS NULL
RETURNING ordenacao_desde

-- name: task_insert_ordered
-- task_insert with an ordering key; due no earlier than %(settle)s (the flag's time plus
-- the workers' longest read interval: no worker still claiming without the ordering check
-- sees it).
INSERT INTO {table} (origem, destino, processo, chave_externa, payload, payload_hash,
                     tenant, grupo_empresarial, pub_sub, prioridade, data_hora, data_hora_inicial,
                     chave_ordem)
VALUES (%(origem)s, %(destino)s, %(processo)s, %(chave_externa)s, %(payload)s, %(payload_hash)s,
        %(tenant)s, %(grupo_empresarial)s, %(pub_sub)s, %(prioridade)s,
        greatest(coalesce(%(data_hora)s::timestamptz, now()), %(settle)s::timestamptz),
        coalesce(%(data_hora)s::timestamptz, now()), %(chave_ordem)s)
RETURNING id

-- name: fair_tenant
-- QUEUE_FAIR_TENANTS: among the due tasks of the top priority, the tenant (NULL as the
-- smallest bigint) right after %(last)s, or the first one (wrapping round); the claim then
-- picks that tenant's oldest task.  Read without locks: the pick decides.
SELECT coalesce(
         (SELECT min(coalesce(c.tenant, -9223372036854775807)) FROM {table} c
           WHERE c.status IN ('pendente', 'agendada') AND c.data_hora <= now()
             AND c.prioridade = p.topo
             AND coalesce(c.tenant, -9223372036854775807) > coalesce(%(last)s::int8, -9223372036854775808)),
         (SELECT min(coalesce(c.tenant, -9223372036854775807)) FROM {table} c
           WHERE c.status IN ('pendente', 'agendada') AND c.data_hora <= now()
             AND c.prioridade = p.topo)) AS tenant
  FROM (SELECT max(prioridade) AS topo FROM {table}
         WHERE status IN ('pendente', 'agendada') AND data_hora <= now()) p
