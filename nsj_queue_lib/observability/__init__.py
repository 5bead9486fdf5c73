"""Observability: everything that lets people and machines see a queue and its workers.

* observe: `TaskObserver`, the one object the runtime reports task events to, and the
  task context that log lines carry;
* logging_setup, logfields, logsafe, loki: logging set-up by entry points, structured
  fields (LOG_FORMAT=json), records made safe before any handler, Grafana Loki;
* metrics: the Prometheus endpoint and /healthz (METRICS_PORT);
* health: the worker heartbeat and the container probe (`python -m nsj_queue_lib.health`);
* status: the queue status report (`python -m nsj_queue_lib.status`);
* http_guard: the HTTP hardening shared by the metrics endpoint and the dashboard.

observe, logfields, logsafe and http_guard sit low (the runtime imports them); the rest
are entry points and services that read the database.
"""
