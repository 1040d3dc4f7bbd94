"""What every app and driver in benchmarks/peers/ shares: standard library only, so that each
peer's own virtualenv can import it (the drivers put this folder on sys.path).

Stamps. Every handler (jobrun, pgqueuer, procrastinate, Celery) calls ``stamp`` around its
work; it appends one line ``key sysid t_enq t_start t_end`` to a file of its own process in
$BENCH_STAMP_DIR (one O_APPEND write, no buffering that a killed child could lose). Times are
``time.time()``: CLOCK_REALTIME, one clock shared by every process on this machine, so the
producer's enqueue time and the handler's start/finish times are comparable across
processes. ``key`` is the benchmark's own job number (negative for warm-up jobs), ``sysid``
the queue's own job id where the handler sees it (0 otherwise).

Open loop. ``open_loop``/``open_loop_async`` issue job i at t0 + i/rate; a tick reached a whole
interval late is skipped and counted (the arrivals never slow down with the system), as in
benchmarks/latency.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from typing import Any, Awaitable, Callable

_fd: int | None = None
_fd_pid = 0


def _stamp_fd() -> int | None:
    global _fd, _fd_pid
    pid = os.getpid()
    if _fd is None or _fd_pid != pid:  # a forked child opens a file of its own
        folder = os.environ.get("BENCH_STAMP_DIR")
        if not folder:
            return None
        _fd = os.open(os.path.join(folder, f"{pid}.stamps"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _fd_pid = pid
    return _fd


def stamp(key: Any, sysid: Any, t_enq: Any, t_start: float, t_end: float) -> None:
    fd = _stamp_fd()
    if fd is not None:
        os.write(fd, f"{key} {sysid or 0} {t_enq or 0} {t_start:.6f} {t_end:.6f}\n".encode())


def burn_cpu(ms: float) -> None:
    """Burn `ms` milliseconds of this process's CPU time in pure Python (as benchapp's cpu)."""
    clock = time.process_time
    end = clock() + ms / 1000.0
    x = 0
    while clock() < end:
        for i in range(100):
            x += i * i


def run_payload(payload: dict | None, sysid: Any = 0) -> None:
    """The body every plain handler runs: optional CPU burn, or a blocking wait of
    ``io_ms`` (``time.sleep``: the ``io-sync`` workload's stand-in for a blocking HTTP call),
    then a stamp."""
    t_start = time.time()
    payload = payload or {}
    ms = payload.get("ms")
    if ms:
        burn_cpu(float(ms))
    io_ms = payload.get("io_ms")
    if io_ms:
        time.sleep(float(io_ms) / 1000.0)
    stamp(payload.get("i", 0), sysid, payload.get("t"), t_start, time.time())


async def run_payload_async(payload: dict | None, sysid: Any = 0) -> None:
    """The body every ``async def`` handler of the ``io`` workload runs: ``await
    asyncio.sleep`` for ``io_ms`` (an awaited HTTP call's stand-in), then a stamp."""
    t_start = time.time()
    payload = payload or {}
    await asyncio.sleep(float(payload.get("io_ms", 0)) / 1000.0)
    stamp(payload.get("i", 0), sysid, payload.get("t"), t_start, time.time())


# --- open-loop producers ------------------------------------------------------------------

class Schedule:
    """Ticks index, index+P, ... of t0 + i/rate; late ticks skipped and counted."""

    def __init__(self, index: int, producers: int, rate: float, total: int) -> None:
        self.i = index
        self.producers = producers
        self.rate = rate
        self.total = total
        self.step = producers / rate
        self.skipped = 0
        self.sent = 0
        self.calls: list[float] = []
        self.lag: list[float] = []

    def next_tick(self, t0: float) -> tuple[int, float] | None:
        """(i, seconds to sleep) of the next tick to send, or None when done."""
        while self.i < self.total:
            target = t0 + self.i / self.rate
            now = time.monotonic()
            if now - target >= self.step:
                missed = int((now - target) / self.step)
                missed = min(missed, (self.total - 1 - self.i) // self.producers + 1)
                self.skipped += missed
                self.i += missed * self.producers
                continue
            return self.i, max(0.0, target - now)
        return None


def wait_go() -> float:
    """Block until the orchestrator writes a line on stdin: the monotonic start time t0
    (absolute, as seen by time.monotonic(), which is system-wide on Linux)."""
    line = sys.stdin.readline()
    if not line.strip():
        raise SystemExit("producer: no go signal")
    return float(line)


def report(schedules: list[Schedule], extra: dict | None = None) -> None:
    out = {"sent": sum(s.sent for s in schedules), "skipped": sum(s.skipped for s in schedules),
           "calls_ms": [round(c * 1000, 3) for s in schedules for c in s.calls],
           "lag_ms": [round(c * 1000, 3) for s in schedules for c in s.lag]}
    out.update(extra or {})
    print("RESULT " + json.dumps(out), flush=True)


def _slots(producers: int, slot: int, slots: int) -> tuple[list[int], int]:
    """This process's senders' global indexes among all processes' and the stride: process
    `slot` of `slots`, `producers` senders each, sends ticks g, g + stride, ... for each of its g."""
    stride = producers * slots
    return [slot * producers + p for p in range(producers)], stride


def open_loop(make_sender: Callable[[int], Callable[[int, float], None]], producers: int,
              rate: float, total: int, slot: int = 0, slots: int = 1) -> None:
    """Threads, one sender (own connection) each: `make_sender(p)` returns send(i, t_enq).
    Each sends warm-up job -(g+1) first (g its global index); prints READY, waits for t0 on
    stdin, then runs. With `slots` processes, each runs its share of the ticks."""
    ids, stride = _slots(producers, slot, slots)
    senders = [make_sender(p) for p in range(producers)]
    for g, send in zip(ids, senders):
        send(-(g + 1), time.time())
    print("READY", flush=True)
    t0 = wait_go()
    schedules = [Schedule(g, stride, rate, total) for g in ids]
    errors: list[BaseException] = []

    def work(p: int) -> None:
        sched, send = schedules[p], senders[p]
        try:
            while (tick := sched.next_tick(t0)) is not None:
                i, pause = tick
                if pause:
                    time.sleep(pause)
                sched.lag.append(time.monotonic() - (t0 + i / rate))
                began = time.monotonic()
                send(i, time.time())
                sched.calls.append(time.monotonic() - began)
                sched.sent += 1
                sched.i += stride
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(p,), daemon=True) for p in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    report(schedules)


async def open_loop_async(make_sender: Callable[[int], Awaitable[Callable[[int, float], Awaitable[None]]]],
                          producers: int, rate: float, total: int, slot: int = 0,
                          slots: int = 1) -> None:
    """The asyncio version: one task (own connection) per producer."""
    ids, stride = _slots(producers, slot, slots)
    senders = [await make_sender(p) for p in range(producers)]
    for g, send in zip(ids, senders):
        await send(-(g + 1), time.time())
    print("READY", flush=True)
    t0 = await asyncio.get_running_loop().run_in_executor(None, wait_go)
    schedules = [Schedule(g, stride, rate, total) for g in ids]

    async def work(p: int) -> None:
        sched, send = schedules[p], senders[p]
        while (tick := sched.next_tick(t0)) is not None:
            i, pause = tick
            if pause:
                await asyncio.sleep(pause)
            sched.lag.append(time.monotonic() - (t0 + i / rate))
            began = time.monotonic()
            await send(i, time.time())
            sched.calls.append(time.monotonic() - began)
            sched.sent += 1
            sched.i += stride

    await asyncio.gather(*(work(p) for p in range(producers)))
    report(schedules)


def chunks(n: int, size: int):
    """(start, count) pairs covering range(n) in pieces of at most `size`."""
    start = 0
    while start < n:
        yield start, min(size, n - start)
        start += size


IO_TASKS = ("io", "io-sync")  # awaited and blocking waits of --io-ms


def payload_for(task: str, i: int, cpu_ms: float, t_enq: float | None = None,
                io_ms: float = 100.0) -> dict:
    body: dict[str, Any] = {"i": i}
    if task == "cpu":
        body["ms"] = cpu_ms
    elif task in IO_TASKS:
        body["io_ms"] = io_ms
    if t_enq is not None:
        body["t"] = round(t_enq, 6)
    return body


def driver_parser(producers: int, extra: Callable[[argparse.ArgumentParser], None] | None = None
                  ) -> tuple[argparse.ArgumentParser, Any]:
    """The argument parser every peer driver shares: `enqueue` (bulk, untimed) and `produce`
    (open loop) with the same options; ``extra`` adds a system's own options to both."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("enqueue", "produce"):
        p = sub.add_parser(name)
        if extra is not None:
            extra(p)
        p.add_argument("--task", default="noop")
        p.add_argument("--cpu-ms", type=float, default=5.0)
        p.add_argument("--io-ms", type=float, default=100.0, help="io, io-sync: the wait of each job")
        p.add_argument("--n", type=int, default=20000)
        p.add_argument("--chunk", type=int, default=5000)
        p.add_argument("--rate", type=float, default=200.0)
        p.add_argument("--seconds", type=float, default=15.0)
        p.add_argument("--producers", type=int, default=producers)
        p.add_argument("--slot", type=int, default=0, help="produce: this process's place among --slots")
        p.add_argument("--slots", type=int, default=1, help="produce: producer processes in all")
    return parser, sub
