-- PostgreSQL bodies of the webhook queries that differ by dialect (see common/webhooks.sql).

-- name: endpoint_get
-- `sonda_restante`: seconds left of the probe's lease (0: no probe under way).
SELECT endpoint, falhas, pausa,
       aberto_ate IS NOT NULL AS aberto,
       greatest(extract(epoch FROM (aberto_ate - now())), 0)::float8 AS restante,
       coalesce(greatest(extract(epoch FROM (sonda_ate - now())), 0), 0)::float8
           AS sonda_restante
  FROM {endpoint_table}
 WHERE endpoint = %(endpoint)s

-- name: endpoint_failure
-- One more consecutive failure; the %(limite)s-th opens the breaker for %(pausa)s s.  It
-- clears the lease of the call that was alone (endpoint_take_probe).
INSERT INTO {endpoint_table} AS e (endpoint, falhas, ultimo_erro, aberto_ate, pausa,
                                   alterado_em)
VALUES (%(endpoint)s, 1, %(erro)s,
        CASE WHEN 1 >= %(limite)s THEN now() + %(pausa)s * interval '1 second' END,
        CASE WHEN 1 >= %(limite)s THEN %(pausa)s ELSE 0 END, now())
ON CONFLICT (endpoint) DO UPDATE
   SET falhas = e.falhas + 1,
       ultimo_erro = excluded.ultimo_erro,
       aberto_ate = CASE WHEN e.aberto_ate IS NULL AND e.falhas + 1 >= %(limite)s
                         THEN now() + %(pausa)s * interval '1 second' ELSE e.aberto_ate END,
       pausa = CASE WHEN e.aberto_ate IS NULL AND e.falhas + 1 >= %(limite)s
                    THEN %(pausa)s ELSE e.pausa END,
       sonda_ate = NULL,
       alterado_em = now()

-- name: endpoint_probe_failed
-- The probe failed: open again for twice the last pause (at most %(maximo)s s).
UPDATE {endpoint_table}
   SET falhas = falhas + 1,
       ultimo_erro = %(erro)s,
       pausa = least(greatest(pausa, 1) * 2, %(maximo)s),
       aberto_ate = now() + least(greatest(pausa, 1) * 2, %(maximo)s) * interval '1 second',
       sonda_ate = NULL,
       alterado_em = now()
 WHERE endpoint = %(endpoint)s

-- name: delivery_purge
-- Delivery-log rows older than %(days)s days, at most %(limit)s per statement.
DELETE FROM {delivery_table}
 WHERE id IN (SELECT id FROM {delivery_table}
               WHERE data_hora < now() - %(days)s * interval '1 day'
               LIMIT %(limit)s)
