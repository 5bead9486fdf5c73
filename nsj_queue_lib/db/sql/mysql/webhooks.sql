-- MySQL/MariaDB bodies of the webhook queries that differ by dialect (see
-- common/webhooks.sql).  Columns hold UTC; ON DUPLICATE KEY UPDATE assigns left to right.

-- name: endpoint_get
SELECT endpoint, falhas, pausa,
       aberto_ate IS NOT NULL AS aberto,
       GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), aberto_ate) / 1000000, 0)
           AS restante,
       COALESCE(GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), sonda_ate) / 1000000,
                         0), 0) AS sonda_restante
  FROM {endpoint_table}
 WHERE endpoint = %(endpoint)s

-- name: endpoint_failure
INSERT INTO {endpoint_table} (endpoint, falhas, ultimo_erro, aberto_ate, pausa, alterado_em)
VALUES (%(endpoint)s, 1, %(erro)s,
        CASE WHEN 1 >= %(limite)s
             THEN UTC_TIMESTAMP(6) + INTERVAL ROUND(%(pausa)s * 1000000) MICROSECOND END,
        CASE WHEN 1 >= %(limite)s THEN %(pausa)s ELSE 0 END, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
       pausa = CASE WHEN aberto_ate IS NULL AND falhas + 1 >= %(limite)s
                    THEN %(pausa)s ELSE pausa END,
       aberto_ate = CASE WHEN aberto_ate IS NULL AND falhas + 1 >= %(limite)s
                         THEN UTC_TIMESTAMP(6) + INTERVAL ROUND(%(pausa)s * 1000000) MICROSECOND
                         ELSE aberto_ate END,
       falhas = falhas + 1,
       ultimo_erro = VALUES(ultimo_erro),
       sonda_ate = NULL,
       alterado_em = UTC_TIMESTAMP(6)

-- name: endpoint_probe_failed
UPDATE {endpoint_table}
   SET falhas = falhas + 1,
       ultimo_erro = %(erro)s,
       pausa = LEAST(GREATEST(pausa, 1) * 2, %(maximo)s),
       aberto_ate = UTC_TIMESTAMP(6) + INTERVAL pausa SECOND,
       sonda_ate = NULL,
       alterado_em = UTC_TIMESTAMP(6)
 WHERE endpoint = %(endpoint)s

-- name: delivery_purge
DELETE FROM {delivery_table}
 WHERE data_hora < UTC_TIMESTAMP(6) - INTERVAL %(days)s DAY
 LIMIT %(limit)s
