"""The master's metrics HTTP server over a real socket: oversized request lines and headers
get 400/431 and one log line, idle and trickling clients are cut off, connections are capped."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time

import pytest

from jobrun.testing import wait_for
from jobrun.worker.metrics import HttpServer, Metrics


@pytest.fixture
def server():
    loop = asyncio.new_event_loop()
    srv = HttpServer("127.0.0.1", 0, Metrics(), health=lambda: {"ok": True}, ready=lambda: True)
    srv.request_timeout = 1.0
    srv.max_connections = 4
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(_start(srv), loop).result(10)
    try:
        yield srv
    finally:
        # Let connections still being answered (or drained) end before the loop closes.
        wait_for(lambda: srv._open == 0, timeout=10, message="connections to end")
        asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _start(srv: HttpServer) -> None:
    srv.start()
    await srv.started()


def connect(srv: HttpServer) -> socket.socket:
    sock = socket.create_connection(srv.bound, timeout=10)
    return sock


def exchange(srv: HttpServer, data: bytes) -> bytes:
    sock = connect(srv)
    sender = threading.Thread(target=_send_quietly, args=(sock, data))
    sender.start()
    reply = b""
    try:
        while chunk := sock.recv(65536):
            reply += chunk
    except ConnectionResetError:
        pass
    sender.join(10)
    sock.close()
    return reply


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass  # the server may stop reading once it has answered


def no_tracebacks(caplog) -> None:
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


def test_normal_request(server):
    reply = exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK")


def test_huge_request_line_gets_400_and_one_log_line(server, caplog):
    caplog.set_level(logging.WARNING)
    reply = exchange(server, b"GET /" + b"a" * (1 << 20) + b" HTTP/1.1\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 Bad Request"), reply[:100]
    bad = [r for r in caplog.records if "metrics.bad_request" in r.getMessage()]
    assert len(bad) == 1
    no_tracebacks(caplog)


def test_huge_header_gets_431(server, caplog):
    caplog.set_level(logging.WARNING)
    reply = exchange(server, b"GET /metrics HTTP/1.1\r\nX-Big: " + b"b" * (1 << 20) + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:100]
    many = b"".join(b"X-%d: %s\r\n" % (i, b"c" * 1000) for i in range(100))
    reply = exchange(server, b"GET /metrics HTTP/1.1\r\n" + many + b"\r\n")
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:100]
    no_tracebacks(caplog)


def test_idle_connection_is_closed(server):
    server.request_timeout = 0.2  # read when the connection is accepted
    sock = connect(server)
    started = time.monotonic()
    assert sock.recv(100) == b""  # closed by the server, not by our 10 s socket timeout
    assert time.monotonic() - started < 5
    sock.close()


def test_trickling_client_is_cut_off(server):
    server.request_timeout = 0.2  # the whole head, however steadily its lines come
    sock = connect(server)
    sock.sendall(b"GET /metrics HTTP/1.1\r\n")
    started = time.monotonic()
    closed = False
    while time.monotonic() - started < 8:
        try:
            sock.sendall(b"X: y\r\n")  # a header line every 50 ms, never the blank line
        except OSError:
            closed = True
            break
        time.sleep(0.05)  # the client's pace, not synchronisation
        sock.setblocking(False)
        try:
            if sock.recv(100) == b"":
                closed = True
                break
        except BlockingIOError:
            pass
        finally:
            sock.setblocking(True)
    sock.close()
    assert closed and time.monotonic() - started < 5


def test_connection_cap(server):
    idle = [connect(server) for _ in range(server.max_connections)]
    wait_for(lambda: server._open == server.max_connections, timeout=5, message="connections open")
    extra = connect(server)
    assert extra.recv(100).startswith(b"HTTP/1.1 503")
    extra.close()
    for sock in idle:
        sock.close()
    wait_for(lambda: server._open == 0, timeout=5, message="connections closed")
    assert exchange(server, b"GET /readyz HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 200 OK")


def test_a_taken_port_is_refused_at_start_and_crashes_a_server_that_lost_the_race():
    """check_free refuses at start an address another socket listens on; should the port be
    taken between that check and the bind, the server crashes (the master stops, exit 1)
    rather than run on without /metrics and /healthz."""
    from jobrun.worker.metrics import AddressInUse, check_free

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(AddressInUse, match=rf"127\.0\.0\.1:{port} is not available"):
            check_free("127.0.0.1", port)
        crashed: list[BaseException] = []

        async def run() -> None:
            srv = HttpServer("127.0.0.1", port, Metrics(), health=dict, ready=lambda: True)
            srv.on_crash = lambda _, exc: crashed.append(exc)
            srv.start()
            await srv.started()
            with pytest.raises(AddressInUse):
                await srv._task
        asyncio.run(run())
        assert len(crashed) == 1 and isinstance(crashed[0], AddressInUse)
    check_free("127.0.0.1", port)  # free again once closed
    check_free("127.0.0.1", 0)     # any free port
