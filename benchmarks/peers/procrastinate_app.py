"""procrastinate's side of benchmarks/compare.py (runs in benchmarks/.venv-peers/procrastinate).

    PGDSN=... procrastinate --app=benchmarks.peers.procrastinate_app.app schema --apply
    PGDSN=... procrastinate --app=benchmarks.peers.procrastinate_app.app worker --concurrency 10
    PGDSN=... python benchmarks/peers/procrastinate_app.py enqueue --n 20000 --task noop
    PGDSN=... python benchmarks/peers/procrastinate_app.py produce --rate 1000 --seconds 15

The worker is procrastinate's own CLI worker (asyncio, one process; ``--concurrency`` jobs at
once, each fetched by its own statement) on its PsycopgConnector. Tasks are ``async def``
running peerlib.run_payload inline (a sync task would run in a thread under the GIL: no more
CPU either way); more cores need more worker processes, which compare.py also measures.
Bulk enqueue is ``Task.batch_defer_async`` (procrastinate >= 3.x); the open-loop producer
calls ``defer_async`` once per job.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peerlib  # noqa: E402

import procrastinate  # noqa: E402
import procrastinate.tasks  # noqa: E402

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("PGDSN", "")))


@app.task(name="noop", pass_context=True)
async def noop(context, **kwargs):
    peerlib.run_payload(kwargs, context.job.id)


@app.task(name="cpu", pass_context=True)
async def cpu(context, **kwargs):
    peerlib.run_payload(kwargs, context.job.id)


TASKS = {"noop": noop, "cpu": cpu}


async def cmd_enqueue(args: argparse.Namespace) -> None:
    task = TASKS[args.task]
    async with app.open_async():
        await app.connector.execute_query_async("SELECT 1")
        began = time.perf_counter()
        for start, count in peerlib.chunks(args.n, args.chunk):
            await task.batch_defer_async(*[peerlib.payload_for(args.task, i, args.cpu_ms)
                                           for i in range(start, start + count)])
        seconds = time.perf_counter() - began
    print("RESULT " + json.dumps({"seconds": seconds, "n": args.n}), flush=True)


async def cmd_produce(args: argparse.Namespace) -> None:
    task = TASKS[args.task]
    # One connector (a psycopg pool) per producer, so producers do not share a connection.
    apps = []

    async def make_sender(p: int):
        own = app.with_connector(procrastinate.PsycopgConnector(
            conninfo=os.environ["PGDSN"], min_size=1, max_size=1))
        await own.open_async()
        apps.append(own)
        deferrer = procrastinate.tasks.configure_task(name=task.name, job_manager=own.job_manager)

        async def send(i: int, t: float) -> None:
            await deferrer.defer_async(**peerlib.payload_for(args.task, i, args.cpu_ms, t))
        return send

    try:
        await peerlib.open_loop_async(make_sender, args.producers, args.rate,
                                      int(args.rate * args.seconds), args.slot, args.slots)
    finally:
        for a in apps:
            await a.close_async()


def main() -> None:
    parser, sub = peerlib.driver_parser(2)
    args = parser.parse_args()
    asyncio.run({"enqueue": cmd_enqueue, "produce": cmd_produce}[args.cmd](args))


if __name__ == "__main__":
    main()
