"""pgqueuer's side of benchmarks/compare.py (runs in benchmarks/.venv-peers/pgqueuer).

    PGDSN=... pgq install
    PGDSN=... python benchmarks/peers/pgqueuer_app.py worker --batch-size 10   # the worker
    PGDSN=... python benchmarks/peers/pgqueuer_app.py enqueue --n 20000 --task noop
    PGDSN=... python benchmarks/peers/pgqueuer_app.py produce --rate 1000 --seconds 15

The worker is pgqueuer's documented shape: a factory yielding a ``PgQueuer`` over one asyncpg
connection, run by ``pgqueuer.run`` -- the function behind ``pgq run`` ("as pgq run does,
without the CLI"), on uvloop as ``pgq run`` does when it is installed. (``pgq run`` itself
fails at start in pgqueuer 1.6.0 with this typer: its --log-level parser hands a str where
an enum is expected: AttributeError: 'str' object has no attribute 'name'.) Entrypoints must
be ``async def`` in pgqueuer 1.x; the handlers run peerlib.run_payload inline, so a ``cpu``
job holds the event loop for its 5 ms, exactly as any CPU-bound async handler does (pgqueuer
has no process pool: to use more cores one runs more ``pgq run`` processes, which compare.py
also measures). ``io`` awaits ``asyncio.sleep`` (peerlib.run_payload_async). ``io-sync`` is
the blocking body (``time.sleep``) the way pgqueuer 1.x documents for blocking code, since it
refuses plain entrypoints: ``async def entry(job): await asyncio.to_thread(blocking, job)``.
``to_thread`` runs on the loop's default executor, which Python sizes min(32, cores + 4);
``worker --threads N`` replaces it with a pool of N threads, as a user with blocking I/O
would. Bulk enqueue is ``Queries.enqueue`` with lists (one statement per chunk); the
open-loop producer calls ``Queries.enqueue`` once per job on its own asyncpg connection.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peerlib  # noqa: E402

import asyncpg  # noqa: E402
from pgqueuer import PgQueuer  # noqa: E402
from pgqueuer.db import AsyncpgDriver  # noqa: E402
from pgqueuer.models import Job  # noqa: E402
from pgqueuer.queries import Queries  # noqa: E402


@contextlib.asynccontextmanager
async def create():
    conn = await asyncpg.connect(os.environ["PGDSN"])
    pgq = PgQueuer.from_asyncpg_connection(conn)

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        peerlib.run_payload(json.loads(job.payload) if job.payload else None, job.id)

    @pgq.entrypoint("cpu")
    async def cpu(job: Job) -> None:
        peerlib.run_payload(json.loads(job.payload) if job.payload else None, job.id)

    @pgq.entrypoint("io")
    async def io(job: Job) -> None:
        await peerlib.run_payload_async(json.loads(job.payload) if job.payload else None, job.id)

    @pgq.entrypoint("io-sync")
    async def io_sync(job: Job) -> None:
        await asyncio.to_thread(peerlib.run_payload,
                                json.loads(job.payload) if job.payload else None, job.id)

    try:
        yield pgq
    finally:
        await conn.close()


def _body(task: str, i: int, cpu_ms: float, t: float | None = None, io_ms: float = 100.0) -> bytes:
    return json.dumps(peerlib.payload_for(task, i, cpu_ms, t, io_ms)).encode()


async def cmd_enqueue(args: argparse.Namespace) -> None:
    conn = await asyncpg.connect(os.environ["PGDSN"])
    try:
        q = Queries(AsyncpgDriver(conn))
        await conn.fetchval("SELECT 1")
        began = time.perf_counter()
        for start, count in peerlib.chunks(args.n, args.chunk):
            await q.enqueue([args.task] * count,
                            [_body(args.task, i, args.cpu_ms, io_ms=args.io_ms)
                             for i in range(start, start + count)],
                            [0] * count)
        seconds = time.perf_counter() - began
    finally:
        await conn.close()
    print("RESULT " + json.dumps({"seconds": seconds, "n": args.n}), flush=True)


async def cmd_produce(args: argparse.Namespace) -> None:
    conns = []

    async def make_sender(p: int):
        conn = await asyncpg.connect(os.environ["PGDSN"])
        conns.append(conn)
        q = Queries(AsyncpgDriver(conn))

        async def send(i: int, t: float) -> None:
            await q.enqueue(args.task, _body(args.task, i, args.cpu_ms, t))
        return send

    try:
        await peerlib.open_loop_async(make_sender, args.producers, args.rate,
                                      int(args.rate * args.seconds), args.slot, args.slots)
    finally:
        for c in conns:
            await c.close()


async def cmd_worker(args: argparse.Namespace) -> None:
    import pgqueuer
    from concurrent.futures import ThreadPoolExecutor
    from datetime import timedelta

    if args.threads:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=args.threads))
    await pgqueuer.run(create, batch_size=args.batch_size,
                       dequeue_timeout=timedelta(seconds=args.dequeue_timeout),
                       max_concurrent_tasks=args.max_concurrent_tasks)


def main() -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    parser, sub = peerlib.driver_parser(2)
    w = sub.add_parser("worker")
    w.add_argument("--batch-size", type=int, default=10)
    w.add_argument("--dequeue-timeout", type=float, default=30.0)
    w.add_argument("--max-concurrent-tasks", type=int, default=None)
    w.add_argument("--threads", type=int, default=0,
                   help="the loop's default executor (asyncio.to_thread) gets this many threads")
    args = parser.parse_args()
    import uvloop

    uvloop.run({"enqueue": cmd_enqueue, "produce": cmd_produce, "worker": cmd_worker}[args.cmd](args))


if __name__ == "__main__":
    main()
