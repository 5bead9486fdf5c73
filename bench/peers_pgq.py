"""PgQueuer side of bench/bench_peers.py; run it with the python of the PgQueuer venv.

    python peers_pgq.py install        # PgQueuer's schema in DB_BASE
    python peers_pgq.py load N         # N jobs "noop", payload = their number
    python peers_pgq.py work [BATCH]   # one consumer process (PgQueuer's defaults, batch 10)
    python peers_pgq.py latency M      # M jobs one by one, prints the pickup times (JSON)

The database is the one of DB_HOST/DB_PORT/DB_USER/DB_PASS/DB_BASE.  Each job does what
the other systems' tasks do: it inserts one row (its number, its start time) into
nsjq_bench.efeitos, here in an autocommit statement of its own (PgQueuer does not run a
job inside a transaction of the queue).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

import asyncpg
from pgqueuer import PgQueuer, Queries

EFFECT = "INSERT INTO nsjq_bench.efeitos (tarefa_id, t_inicio) VALUES ($1, $2)"


def connect_args() -> dict:
    env = os.environ
    return {"host": env["DB_HOST"], "port": int(env["DB_PORT"]), "user": env["DB_USER"],
            "password": env.get("DB_PASS") or None, "database": env["DB_BASE"]}


async def install() -> None:
    conn = await asyncpg.connect(**connect_args())
    await Queries.from_asyncpg_connection(conn).install()
    await conn.close()


async def load(n: int, chunk: int = 1000) -> None:
    conn = await asyncpg.connect(**connect_args())
    queries = Queries.from_asyncpg_connection(conn)
    for first in range(0, n, chunk):
        numbers = range(first, min(n, first + chunk))
        await queries.enqueue(["noop"] * len(numbers), [str(i).encode() for i in numbers],
                              [0] * len(numbers))
    await conn.close()


async def work(batch_size: int) -> None:
    conn = await asyncpg.connect(**connect_args())
    # The side effects go through a small pool: a process runs the jobs of a batch
    # concurrently, and one asyncpg connection takes one statement at a time.
    effects = await asyncpg.create_pool(**connect_args(), min_size=1, max_size=2)
    pgq = PgQueuer.from_asyncpg_connection(conn)

    @pgq.entrypoint("noop")
    async def noop(job) -> None:  # job: pgqueuer.models.Job
        # The start is taken once the job has a connection: PgQueuer keeps dequeuing while
        # earlier jobs wait for one, so the dispatch time would measure the dequeue, not
        # the work.
        async with effects.acquire() as effect:
            await effect.execute(EFFECT, int(job.payload.decode()), time.time())

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, pgq.shutdown.set)
    try:
        await pgq.run(batch_size=batch_size)
    finally:
        await effects.close()
        await conn.close()


async def wait_effect(read: asyncpg.Connection, number: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started = await read.fetchval("SELECT t_inicio FROM nsjq_bench.efeitos "
                                      "WHERE tarefa_id = $1", number)
        if started is not None:
            return started
        await asyncio.sleep(0.001)
    raise TimeoutError(f"job {number} not started within {timeout} s")


async def latency(samples: int) -> None:
    """The same loop as bench_peers.pickup_latency: one job per transaction, its start
    polled every millisecond, 10 ms between samples; a warm-up job first."""
    conn = await asyncpg.connect(**connect_args())
    read = await asyncpg.connect(**connect_args())
    queries = Queries.from_asyncpg_connection(conn)
    async with conn.transaction():
        await queries.enqueue("noop", b"-1")
    await wait_effect(read, -1, 60)
    await asyncio.sleep(1)
    out = []
    for i in range(samples):
        async with conn.transaction():
            await queries.enqueue("noop", str(i).encode())
        committed = time.time()
        out.append((await wait_effect(read, i, 10) - committed) * 1000)
        await asyncio.sleep(0.01)
    await read.close()
    await conn.close()
    print(json.dumps(out))


def main(argv: list) -> int:
    cmd = argv[1]
    if cmd == "install":
        asyncio.run(install())
    elif cmd == "load":
        asyncio.run(load(int(argv[2])))
    elif cmd == "work":
        asyncio.run(work(int(argv[2]) if len(argv) > 2 else 10))
    elif cmd == "latency":
        asyncio.run(latency(int(argv[2])))
    else:
        raise SystemExit(f"unknown command {cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
