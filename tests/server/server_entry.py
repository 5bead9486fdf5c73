"""Test entry point: run the real `Server` with a fake due-task check.

    python tests/server/server_entry.py --notify-port 0 --lock-port 0 [options]

The check reports due tasks while the file given by --due-file exists.  When
the ports are bound, one line ``READY {"notify_port": N, "lock_port": M}`` is
printed on stdout.  SIGTERM/SIGINT stop the server gracefully (exit code 0).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from nsj_queue_lib.server.core import Server
from nsj_queue_lib.server.server_main import serve

logger = logging.getLogger(__name__)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--notify-port", type=int, default=0)
    parser.add_argument("--lock-port", type=int, default=0)
    parser.add_argument("--token", default=None)
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--heartbeat", type=float, default=None)
    parser.add_argument("--max-clients", type=int, default=100)
    parser.add_argument("--check-interval", type=float, default=0.2)
    parser.add_argument("--accept-wait", type=float, default=30.0)
    parser.add_argument("--due-file", default=None)
    parser.add_argument("--channel", default="fila_teste")
    parser.add_argument("--producer-token", default=None)
    parser.add_argument("--max-handshakes", type=int, default=8)
    parser.add_argument("--max-locks", type=int, default=10_000)
    parser.add_argument("--reserved-worker-slots", type=int, default=None)
    parser.add_argument("--log-interval", type=float, default=60.0)
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG,
                        format="%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s")

    def has_due_tasks() -> bool:
        return bool(args.due_file) and os.path.exists(args.due_file)

    server = Server(has_due_tasks, host=args.host, notify_port=args.notify_port,
                    lock_port=args.lock_port, token=args.token, timeout=args.timeout,
                    heartbeat_interval=args.heartbeat, max_clients=args.max_clients,
                    check_interval=args.check_interval, accept_wait=args.accept_wait,
                    channel=args.channel, producer_token=args.producer_token,
                    max_handshakes=args.max_handshakes, max_locks_per_client=args.max_locks,
                    reserved_worker_slots=args.reserved_worker_slots,
                    log_interval=args.log_interval)

    def ready(srv: Server) -> None:
        ports = {"notify_port": srv.notify_port, "lock_port": srv.lock_port}
        print("READY " + json.dumps(ports), flush=True)

    return serve(server, on_ready=ready)


if __name__ == "__main__":
    sys.exit(main())
