"""The worker's machinery, backend-neutral: it speaks to the database only through the
protocol of nsj_queue_lib.engine.base.

supervisor (`WorkerRuntime`: wiring, start-up checks, shutdown, exit codes), consumer
(the loop: wait, claim, run), runner and batch (one task or a batch per transaction),
failure (retry or dead letter), concurrency (QUEUE_CONCURRENCY task threads), maintenance
(`AdminJobs`: rescue, purge and the other jobs the workers share), pause, router (the
task's handler), and the helpers: back-off and time slots, signals, reconnect,
background threads.
"""
