"""Prometheus metrics and the master's HTTP endpoints (/metrics, /healthz, /readyz).

Children report through the master (their results carry what is measured), so there are no
multiprocess metric files. Label values are bounded: queue and task names (a closed set
declared by the app and the queues table), outcomes and reasons (fixed vocabularies), never
a job id. Queue depth comes from a cache that the registry service refreshes every few seconds
with one cheap query, never computed per scrape.

The HTTP server runs on the master's event loop, so /healthz answering at all means the loop
is alive. It binds a loopback address unless explicitly allowed otherwise.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import platform
import socket
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from jobrun.errors import InvalidInput, JobrunError
from jobrun.worker.lifecycle import Service
from jobrun.logs import event

log = logging.getLogger("jobrun.metrics")

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60, 300)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    def __init__(self) -> None:
        from jobrun import __version__

        disable_created_metrics()  # no *_created series: they double the output for nothing
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.queue_depth = Gauge("jobrun_queue_depth", "Jobs per queue and status (cached)",
                                 ["queue", "status"], registry=r)
        self.queue_masters = Gauge(
            "jobrun_queue_masters", "Live masters serving the queue (cached); 0 while it holds"
            " queued jobs: nothing will run them", ["queue"], registry=r)
        # Queues holding queued jobs that no live master serves, with how many (for /healthz).
        self.unserved: dict[str, int] = {}
        self.jobs = Counter("jobrun_jobs", "Attempts ended, by outcome", ["queue", "task", "outcome"],
                            registry=r)
        self.dead = Counter("jobrun_jobs_dead", "Jobs that ended dead (attempts or crashes spent, or Permanent)",
                            ["queue", "task"], registry=r)
        self.duration = Histogram("jobrun_job_duration_seconds", "Attempt run time in the child",
                                  ["queue", "task"], buckets=DURATION_BUCKETS, registry=r)
        self.wait = Histogram("jobrun_job_wait_seconds",
                              "From runnable (enqueue, or run_at) to claim", ["queue"],
                              buckets=WAIT_BUCKETS, registry=r)
        self.children = Gauge("jobrun_children", "Child processes by state", ["state"], registry=r)
        self.slots = Gauge("jobrun_slots", "Jobs running in the children (busy) and the jobs the"
                           " serving children can run at once (total: children x --slots)",
                           ["state"], registry=r)
        self.child_exits = Counter("jobrun_child_exits", "Child exits by reason", ["reason"],
                                   registry=r)
        self.fenced = Counter("jobrun_lease_fenced", "Leases this master fenced", registry=r)
        self.expired = Counter("jobrun_lease_expired", "Expired leases reaped by this master",
                               registry=r)
        self.aged = Counter("jobrun_jobs_aged", "Queued jobs this master's aging sweeper promoted"
                            " (each by the steps it was owed)", ["queue"], registry=r)
        self.refused = Counter("jobrun_completion_refused",
                               "Outcomes the fencing guard refused (lease lost)", registry=r)
        self.held_back = Counter(
            "jobrun_claim_held_back", "Claims that left runnable jobs of a queue queued because of"
            " a limit (reason: concurrency, rate, key, master_limit)", ["queue", "reason"],
            registry=r)
        self.queue_limit = Gauge(
            "jobrun_queue_limit", "A queue's limits (cached): concurrency (cluster-wide leased),"
            " rate (starts per rate_period_seconds), rate_period_seconds, key_concurrency",
            ["queue", "limit"], registry=r)
        self.claim_batch = Histogram("jobrun_claim_batch_size", "Jobs per claim statement",
                                     buckets=BATCH_BUCKETS, registry=r)
        self.db_errors = Counter("jobrun_db_errors", "Database errors by operation", ["op"],
                                 registry=r)
        self.forkserver_deaths = Counter("jobrun_forkserver_deaths",
                                         "Fork servers that died unasked (each is restarted)",
                                         registry=r)
        self.reload_failures = Counter("jobrun_reload_failures",
                                       "Reloads (SIGHUP) that failed: a configuration refused,"
                                       " or new children that did not load", registry=r)
        self.generation = Gauge("jobrun_generation", "The generation of children serving jobs",
                                registry=r)
        # Recurring schedules (worker/scheduler.py); only the leading master's move.
        self.schedule_fires = Counter("jobrun_schedule_fires", "Jobs enqueued by schedules",
                                      registry=r)
        self.schedule_skipped = Counter("jobrun_schedule_skipped",
                                        "Schedule slots skipped (catch-up policy)", registry=r)
        self.schedule_catch_up = Counter("jobrun_schedule_catch_up_fires",
                                         "Jobs enqueued for slots missed during downtime",
                                         registry=r)
        self.scheduler_leader_changes = Counter(
            "jobrun_scheduler_leader_changes", "Times this master became the scheduler leader",
            registry=r)
        self.scheduler_leading = Gauge("jobrun_scheduler_leader",
                                       "1 while this master leads the scheduler", registry=r)
        self.schedule_lag = Histogram("jobrun_schedule_fire_lag_seconds",
                                      "From a schedule slot to its job's enqueue",
                                      buckets=WAIT_BUCKETS, registry=r)
        self.workflows_running = Gauge("jobrun_workflows_running",
                                       "Workflows with a member not finished (cached)",
                                       registry=r)
        self.build = Gauge("jobrun_build_info", "jobrun build", ["version", "python"], registry=r)
        self.build.labels(__version__, platform.python_version()).set(1)
        from jobrun.worker.otelmetrics import mirror

        mirror(self)  # as OpenTelemetry instruments too, when those are on

    def set_children(self, states: dict[str, int], slots: tuple[int, int] = (0, 0)) -> None:
        for state in ("starting", "standby", "idle", "busy", "retiring"):
            self.children.labels(state).set(states.get(state, 0))
        self.slots.labels("busy").set(slots[0])
        self.slots.labels("total").set(slots[1])

    def set_depth(self, rows: list[dict]) -> None:
        self.queue_depth.clear()
        self.queue_limit.clear()
        self.queue_masters.clear()
        for row in rows:
            for status in ("waiting", "queued", "scheduled", "leased"):
                self.queue_depth.labels(row["queue"], status).set(row.get(status) or 0)
            self.queue_masters.labels(row["queue"]).set(row["masters"])
            for limit in ("concurrency", "rate", "rate_period_seconds", "key_concurrency"):
                if row.get(limit) is not None:
                    self.queue_limit.labels(row["queue"], limit).set(row[limit])
        self.workflows_running.set(rows[0].get("workflows_running") or 0 if rows else 0)
        self.unserved = {row["queue"]: row["queued"] + row["scheduled"] for row in rows
                         if not row["masters"] and row["queued"] + row["scheduled"]}

    def render(self) -> bytes:
        return generate_latest(self.registry)


def parse_addr(addr: str, allow_remote: bool) -> tuple[str, int] | None:
    """'host:port' -> (host, port); '' or 'off' -> None. Refuses non-loopback unless allowed."""
    if addr.strip().lower() in ("", "off", "none", "0"):
        return None
    host, sep, port_text = addr.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise InvalidInput(f"invalid metrics address {addr!r}: use HOST:PORT, e.g. 127.0.0.1:9110")
    if not allow_remote and not _is_loopback(host):
        raise InvalidInput(
            f"refusing to serve metrics on {host}, which is not a loopback address"
            " (set metrics_allow_remote = true, or --metrics-allow-remote, to allow it)")
    return host, int(port_text)


def check_free(host: str, port: int) -> None:
    """Refuse at start an address another process already listens on (a second master on one
    host with the same --metrics-addr): run on without /metrics and /healthz, it would leave
    `jobrun health` and the scrapes reporting the other master. Binds and closes a probe
    socket with the server's own options; a port 0 is always free. (A race that takes the
    port between this check and the server's bind stops the master: HttpServer._run.)"""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise InvalidInput(f"metrics address {host}:{port}: {exc}") from None
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                raise AddressInUse(host, port, exc) from None


class AddressInUse(JobrunError):
    """The metrics address is taken (by another master, most likely)."""

    def __init__(self, host: str, port: int, exc: OSError) -> None:
        super().__init__(f"metrics address {host}:{port} is not available ({exc.strerror or exc});"
                         " another master on this host may use it: give this one its own"
                         " --metrics-addr HOST:PORT, or --metrics-addr off")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Refused(Exception):
    """A request refused before it was read whole: the status to answer, the reason to log."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class HttpServer(Service):
    """A small HTTP/1.1 server: GET /metrics, /healthz, /readyz; anything else 404.

    A request must arrive whole within ``request_timeout`` (idle and trickling clients are cut
    off), with a request line and headers of at most ``MAX_LINE`` bytes each and ``MAX_HEAD``
    in all (else 400 or 431); at most ``max_connections`` are served at once (else 503).
    """

    name = "http"
    MAX_LINE = 8 * 1024
    MAX_HEAD = 32 * 1024
    request_timeout = 10.0
    write_timeout = 10.0
    max_connections = 64

    def __init__(self, host: str, port: int, metrics: Metrics,
                 health: Callable[[], dict], ready: Callable[[], bool]) -> None:
        super().__init__()
        self.host, self.port = host, port
        self.metrics = metrics
        self.health = health
        self.ready = ready
        self.bound: tuple[str, int] | None = None
        self._server: asyncio.base_events.Server | None = None
        self._started = asyncio.Event()
        self._open = 0

    async def _run(self) -> None:
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port,
                                                      reuse_address=True, limit=self.MAX_LINE)
        except OSError as exc:
            # Taken since check_free passed at start: a master without its /healthz is one that
            # `jobrun health` and systemd cannot see, so stop it (a crashed part: exit 1).
            self._started.set()
            raise AddressInUse(self.host, self.port, exc) from None
        sock = self._server.sockets[0]
        self.bound = sock.getsockname()[:2]
        event(log, logging.INFO, "metrics.listening", addr=f"{self.bound[0]}:{self.bound[1]}")
        self._started.set()
        try:
            await asyncio.Event().wait()
        finally:
            self._server.close()

    async def started(self) -> None:
        await self._started.wait()

    async def _read_head(self, reader: asyncio.StreamReader) -> list[str]:
        """The request line split in words; the headers are read and skipped."""
        try:
            request = await reader.readline()
        except ValueError:  # over the stream's line limit
            raise _Refused("400 Bad Request", f"request line over {self.MAX_LINE} bytes") from None
        size = len(request)
        while True:
            try:
                line = await reader.readline()
            except ValueError:
                raise _Refused("431 Request Header Fields Too Large",
                               f"header line over {self.MAX_LINE} bytes") from None
            size += len(line)
            if size > self.MAX_HEAD:
                raise _Refused("431 Request Header Fields Too Large",
                               f"headers over {self.MAX_HEAD} bytes")
            if line in (b"\r\n", b"\n", b""):
                return request.decode("latin-1").split()

    def _respond(self, parts: list[str]) -> tuple[str, str, bytes]:
        path = parts[1].split("?")[0] if len(parts) >= 2 else ""
        if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, self.metrics.render()
        if path == "/healthz":
            # What this master found of the cluster, whatever its own health: jobs waiting in
            # queues no live master serves (`jobrun health` says so).
            report = {**self.health(), "unserved_queues": self.metrics.unserved}
            status = "200 OK" if report.get("ok") else "503 Service Unavailable"
            return status, "application/json", json.dumps(report).encode() + b"\n"
        if path == "/readyz":
            ok = self.ready()
            status = "200 OK" if ok else "503 Service Unavailable"
            return status, "text/plain", b"ready\n" if ok else b"not ready\n"
        return "404 Not Found", "text/plain", b"not found\n"

    async def _write(self, writer: asyncio.StreamWriter, status: str, ctype: str, body: bytes,
                     with_body: bool = True) -> None:
        head = (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        writer.write(head + (body if with_body else b""))
        await asyncio.wait_for(writer.drain(), self.write_timeout)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        try:
            if self._open > self.max_connections:
                event(log, logging.WARNING, "metrics.refused", reason="too many connections",
                      limit=self.max_connections)
                await self._write(writer, "503 Service Unavailable", "text/plain", b"busy\n")
                return
            try:
                parts = await asyncio.wait_for(self._read_head(reader), self.request_timeout)
            except _Refused as refused:
                event(log, logging.WARNING, "metrics.bad_request", status=refused.status[:3],
                      reason=str(refused))
                await self._write(writer, refused.status, "text/plain", f"{refused}\n".encode())
                await self._discard(reader, writer)
                return
            status, ctype, body = self._respond(parts)
            await self._write(writer, status, ctype, body, with_body=bool(parts) and parts[0] != "HEAD")
        except (asyncio.TimeoutError, ConnectionError, OSError):
            pass  # an idle, slow or vanished client: just close
        finally:
            self._open -= 1
            writer.close()

    async def _discard(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read (and drop) what the client is still sending, briefly, after answering: closing
        with unread data resets the connection, and the client would lose the answer."""
        if writer.can_write_eof():
            writer.write_eof()
        try:
            async with asyncio.timeout(1.0):
                for _ in range(256):  # at most 256 reads of the stream's buffer
                    if not await reader.read(64 * 1024):
                        break
        except (asyncio.TimeoutError, ConnectionError, OSError):
            pass
