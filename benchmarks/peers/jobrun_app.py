"""jobrun's side of benchmarks/compare.py: the app the master runs and the producer driver.

    jobrun-master -A benchmarks.peers.jobrun_app -c 4          # the worker (compare.py starts it)
    python benchmarks/peers/jobrun_app.py enqueue --dsn D --schema S --n 20000 --task noop
    python benchmarks/peers/jobrun_app.py produce --dsn D --schema S --rate 1000 --seconds 15

Tasks ``noop`` and ``cpu`` run peerlib.run_payload: the same body as every peer's handler
(optional pure-Python CPU burn, then one stamp line). ``io`` is an ``async def`` handler that
awaits ``asyncio.sleep`` (peerlib.run_payload_async): with ``--slots`` N it shares a child, as
every async handler does. ``io-sync`` is a plain handler that calls ``time.sleep``, declared
thread-safe (``slots=True``): with ``--slots`` N it runs on the child's thread pool. Bulk enqueue is Client.enqueue_many in
chunks (one statement each); the open-loop producer calls Client.enqueue once per job (its own
transaction), one connection per producer thread; with ``--client async``, AsyncClient.enqueue
from asyncio tasks on uvloop, one client (connection) per task: the shape of pgqueuer's
producer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peerlib  # noqa: E402

import jobrun  # noqa: E402

app = jobrun.App()


@app.task("noop")
def noop(job: jobrun.Job):
    peerlib.run_payload(job.payload, job.id)


@app.task("cpu")
def cpu(job: jobrun.Job):
    peerlib.run_payload(job.payload, job.id)


@app.task("io")
async def io(job: jobrun.Job):
    await peerlib.run_payload_async(job.payload, job.id)


@app.task("io-sync", slots=True)
def io_sync(job: jobrun.Job):
    peerlib.run_payload(job.payload, job.id)


def cmd_enqueue(args: argparse.Namespace) -> None:
    with jobrun.Client(args.dsn, schema=args.schema) as client:
        client.stats()  # opens the connection; not timed
        began = time.perf_counter()
        for start, count in peerlib.chunks(args.n, args.chunk):
            client.enqueue_many([(args.task, peerlib.payload_for(args.task, i, args.cpu_ms,
                                                                 io_ms=args.io_ms))
                                 for i in range(start, start + count)])
        seconds = time.perf_counter() - began
    print("RESULT " + json.dumps({"seconds": seconds, "n": args.n}), flush=True)


def cmd_produce(args: argparse.Namespace) -> None:
    if args.client == "async":
        import uvloop

        uvloop.run(produce_async(args))
        return
    clients = []

    def make_sender(p: int):
        client = jobrun.Client(args.dsn, schema=args.schema)
        clients.append(client)

        def send(i: int, t: float) -> None:
            client.enqueue(args.task, peerlib.payload_for(args.task, i, args.cpu_ms, t))
        return send

    try:
        peerlib.open_loop(make_sender, args.producers, args.rate, int(args.rate * args.seconds),
                          args.slot, args.slots)
    finally:
        for c in clients:
            c.close()


async def produce_async(args: argparse.Namespace) -> None:
    clients = []

    async def make_sender(p: int):
        client = jobrun.AsyncClient(args.dsn, schema=args.schema)
        clients.append(client)

        async def send(i: int, t: float) -> None:
            await client.enqueue(args.task, peerlib.payload_for(args.task, i, args.cpu_ms, t))
        return send

    try:
        await peerlib.open_loop_async(make_sender, args.producers, args.rate,
                                      int(args.rate * args.seconds), args.slot, args.slots)
    finally:
        for c in clients:
            await c.close()


def _database_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dsn", required=True)
    p.add_argument("--schema", required=True)
    p.add_argument("--client", choices=("sync", "async"), default="sync",
                   help="produce: Client from threads, or AsyncClient from asyncio tasks")


def main() -> None:
    parser, sub = peerlib.driver_parser(2, extra=_database_args)
    args = parser.parse_args()
    {"enqueue": cmd_enqueue, "produce": cmd_produce}[args.cmd](args)


if __name__ == "__main__":
    main()
