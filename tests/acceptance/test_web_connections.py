"""What `jobrun web` holds for a client, on a real subprocess over real loopback sockets: idle
and stalled connections are closed, connections past the cap are answered 503 (never reset),
a reader that stopped reading its event stream is dropped, SIGTERM with streams open exits at
once and quietly, and a port in use is one error line."""

from __future__ import annotations

import contextlib
import resource
import signal
import socket
import subprocess
import sys
import time

import httpx
import psycopg
import pytest
from psycopg import sql

from jobrun.testing import wait_for
from jobrun.web.connections import Limits
from tests.webproc import WebProcess, free_port, web_env, web_schema  # noqa: F401


def connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (EOF or reset), reading what it sent."""
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def limited(nofile: int):
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    return preexec


@pytest.fixture
def quick(pg_dsn, web_schema):
    with WebProcess(web_env(pg_dsn, web_schema), "--request-timeout", "1") as server:
        yield server


def test_idle_and_stalled_connections_are_closed(quick):
    idle = connect(quick.port)
    headers = connect(quick.port)
    headers.sendall(b"GET /api/v1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line
    body = connect(quick.port)
    body.sendall(b"POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 b"application/json\r\nContent-Length: 100\r\n\r\n{\"task\": ")
    started = time.monotonic()
    socks = [idle, headers, body]
    try:
        wait_for(lambda: all(closed_by_server(s) for s in socks), timeout=10, interval=0.05,
                 message="the server closes idle and stalled connections")
        assert time.monotonic() - started < 5
        # A client that keeps its word is served as before.
        assert httpx.get(quick.base + "/api/v1/healthz").status_code == 200
    finally:
        for s in socks:
            s.close()
    assert "Traceback" not in quick.output()


def test_past_the_cap_a_request_is_answered_not_reset(pg_dsn, web_schema):
    nofile = 256
    cap = Limits.for_descriptors(nofile)
    server = WebProcess(web_env(pg_dsn, web_schema))
    server.preexec = limited(nofile)
    server.start()
    socks: list[socket.socket] = []
    try:
        # More idle connections than the process has descriptors.
        socks = [connect(server.port) for _ in range(nofile + 50)]
        # The server keeps `max_connections`, and closes the rest (at once, or after the
        # grace that lets a client past the cap read its 503).
        wait_for(lambda: sum(closed_by_server(s) for s in socks)
                 >= len(socks) - cap.max_connections, timeout=20, interval=0.1,
                 message="connections past the cap are closed")
        # (less one or two if the server had yet to see start()'s probes close)
        held = sum(not closed_by_server(s) for s in socks)
        assert cap.max_connections - 2 <= held <= cap.max_connections
        for _ in range(3):
            r = httpx.get(server.base + "/api/v1/healthz", timeout=10)
            assert r.status_code in (200, 503)
        # Once the idle connections go, the server answers as before.
        for s in socks:
            s.close()
        wait_for(lambda: httpx.get(server.base + "/api/v1/healthz").status_code == 200,
                 timeout=10, interval=0.1, message="served again below the cap")
    finally:
        for s in socks:
            s.close()
        out = server.stop()
    assert "web.connections_capped" in out


def test_a_stalled_event_stream_reader_is_dropped(quick, pg_dsn, web_schema):
    # Frames large enough that one of them fills what the kernel and the transport buffer.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("INSERT INTO {}.queues (name) SELECT 'stall-' || g"
                             " FROM generate_series(1, 5000) g ON CONFLICT DO NOTHING")
                     .format(sql.Identifier(web_schema)))
    reader = connect(quick.port, rcvbuf=4096)
    try:
        reader.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        wait_for(lambda: "web.connection_stalled" in quick.output(), timeout=20,
                 interval=0.1, message="the stalled reader is dropped")
        reader.settimeout(10)  # the stream ends: what is still queued for it, then EOF
        with contextlib.suppress(ConnectionResetError):
            while reader.recv(1 << 20):
                pass
        assert httpx.get(quick.base + "/api/v1/healthz").status_code == 200
    finally:
        reader.close()


def open_stream(port: int) -> socket.socket:
    """An event stream, read up to its first frame and then left open."""
    sock = connect(port)
    sock.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    sock.settimeout(10)
    seen = b""
    while b"event: snapshot" not in seen:
        chunk = sock.recv(65536)
        assert chunk, seen
        seen += chunk
    return sock


def test_sigterm_with_event_streams_open_exits_at_once(pg_dsn, web_schema):
    server = WebProcess(web_env(pg_dsn, web_schema)).start()
    streams = [open_stream(server.port) for _ in range(2)]
    try:
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        for s in streams:
            s.close()
    out = server.output()
    assert took < 2.5, out
    assert code == 0, out
    assert "Traceback" not in out and "Exception in ASGI application" not in out
    assert "ERROR" not in out


def test_a_port_in_use_is_one_error_line(pg_dsn, web_schema):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "jobrun", "web", "--bind", f"127.0.0.1:{port}"],
                           env=web_env(pg_dsn, web_schema), capture_output=True, text=True,
                           timeout=60)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jobrun: error:"), r.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "in use" in lines[0]
