"""Celery's side of benchmarks/compare.py (runs in benchmarks/.venv-peers/celery).

    BROKER_URL=redis://127.0.0.1:PORT/0 celery -A benchmarks.peers.celery_app worker \\
        -P prefork -c 4 -O fair --prefetch-multiplier 4 --without-gossip --without-mingle \\
        --without-heartbeat                                       # the worker
    BROKER_URL=... python benchmarks/peers/celery_app.py enqueue --n 20000 --task noop
    BROKER_URL=... python benchmarks/peers/celery_app.py produce --rate 1000 --seconds 15

Celery's prefork pool on a Redis broker (Debian's redis-server, started by compare.py on a
loopback port with persistence off: Celery's broker here is NOT durable the way the PostgreSQL
queues with fsync on are). Results are ignored (no result backend): a finished task leaves
nothing behind but its stamp line. acks_late is off (Celery's default: a task is acked when
it starts). Enqueue is ``apply_async`` per job, in a loop, for the bulk case too (Celery has
no bulk publish for independent tasks).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peerlib  # noqa: E402

from celery import Celery  # noqa: E402

app = Celery("bench", broker=os.environ.get("BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False,
                broker_connection_retry_on_startup=True, worker_send_task_events=False,
                task_serializer="json", accept_content=["json"])


@app.task(name="noop", bind=True)
def noop(self, **kwargs):
    peerlib.run_payload(kwargs, 0)


@app.task(name="cpu", bind=True)
def cpu(self, **kwargs):
    peerlib.run_payload(kwargs, 0)


TASKS = {"noop": noop, "cpu": cpu}


def cmd_enqueue(args: argparse.Namespace) -> None:
    task = TASKS[args.task]
    with app.producer_or_acquire() as producer:
        task.apply_async(kwargs=peerlib.payload_for(args.task, -1, 0), producer=producer)  # warm-up
        began = time.perf_counter()
        for i in range(args.n):
            task.apply_async(kwargs=peerlib.payload_for(args.task, i, args.cpu_ms), producer=producer)
        seconds = time.perf_counter() - began
    print("RESULT " + json.dumps({"seconds": seconds, "n": args.n}), flush=True)


def cmd_produce(args: argparse.Namespace) -> None:
    task = TASKS[args.task]

    def make_sender(p: int):
        def send(i: int, t: float) -> None:
            task.apply_async(kwargs=peerlib.payload_for(args.task, i, args.cpu_ms, t))
        return send

    peerlib.open_loop(make_sender, args.producers, args.rate, int(args.rate * args.seconds),
                      args.slot, args.slots)


def main() -> None:
    parser, sub = peerlib.driver_parser(1)
    args = parser.parse_args()
    {"enqueue": cmd_enqueue, "produce": cmd_produce}[args.cmd](args)


if __name__ == "__main__":
    main()
