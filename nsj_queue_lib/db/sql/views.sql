-- Monitoring views (portable SQL, one text for every dialect). A chain is a task's first
-- attempt plus its retries (they point to it
-- through id_inicial); its current state is the state of its last attempt. A dead-letter
-- chain is a chain of its own (dead = true) whose live_id is the id of the live chain that
-- exhausted its attempts. Publications (pub_sub) and each subscriber's task (publication_id,
-- subscriber_id) are chains too. The views read the whole table: query them for dashboards,
-- not in a loop. CREATE OR REPLACE: this block can be applied alone to an existing queue.
CREATE OR REPLACE VIEW {view_cadeias} AS
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
          FROM {table}
         GROUP BY coalesce(id_inicial, id)) c
  JOIN {table} u ON u.id = c.ultimo_id
  LEFT JOIN (SELECT live_id, min(id) AS morta_id, max(id) AS morta_ultimo_id
               FROM {table}
              WHERE dead AND live_id IS NOT NULL
              GROUP BY live_id) m ON m.live_id = c.id_inicial AND NOT u.dead
  LEFT JOIN {table} mu ON mu.id = m.morta_ultimo_id;

-- Chains per processo, tipo (tarefa, publicacao, assinatura, morta) and current status.
CREATE OR REPLACE VIEW {view_resumo} AS
SELECT processo,
       tipo,
       status,
       count(*) AS cadeias,
       sum(tentativas) AS tentativas,
       min(data_hora_inicial) AS mais_antiga,
       max(data_hora_ultima) AS mais_recente
  FROM {view_cadeias}
 GROUP BY processo, tipo, status;
