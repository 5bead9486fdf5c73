"""The queue server (client/server mode): `python -m nsj_queue_lib.server.server_main`.

* server_main: the entry point (settings, the database probes, logging, metrics);
* core: `Server`, wiring the accept loops, the connections and the periodic probe;
* accept_loop: the accept loop of both ports (notify and lock);
* listener_thread, rpc_interpreter: one connection's requests and the operations;
* claim_pool, locks, refusals, check_tasks_thread: claims handed out by the server,
  lock bookkeeping, refusals of bad clients, the due-task probe.

1.2.2 module paths kept as thin facades: lock_service, lock_service_thread, socket_io,
server_settings, protocol (the protocol itself is nsj_queue_lib.engine.socket.protocol).
"""
