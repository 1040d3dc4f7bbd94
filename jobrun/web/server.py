"""`jobrun web`: the HTTP API as its own process (uvicorn on uvloop, one connection pool).

Loopback by default. A bind to any other address is refused unless a token is configured
(``--token-file``, a file readable by its owner only); the token is read once and never
printed, logged or put in the process title.

The listening sockets are bound here, not by uvicorn, so that an address in use (or not this
host's) is one ``jobrun: error:`` line and exit 1, not uvicorn's log and exit 3.
What the server then accepts is bounded by jobrun.web.connections.
"""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
from dataclasses import dataclass

from jobrun import config, logs
from jobrun.errors import InvalidInput
from jobrun.secretfile import read_private
from jobrun.web import DEFAULT_BIND, REQUEST_TIMEOUT
from jobrun.web.guard import loopback_hosts

GRACEFUL_TIMEOUT = 10  # seconds uvicorn lets open requests finish on SIGTERM


@dataclass(frozen=True)
class Bind:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a name: it may resolve anywhere

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_bind(text: str) -> Bind:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInput(f"invalid --bind {text!r}: HOST:PORT, e.g. {DEFAULT_BIND}")
    return Bind(host, int(port))


def read_token(path: str) -> str:
    token = read_private(path, f"--token-file {path}").strip()
    if len(token) < 16 or any(c.isspace() for c in token):
        raise InvalidInput(f"--token-file {path}: the token must be 16 or more characters,"
                           " no spaces")
    return token


def check_origin(origin: str) -> str:
    if origin == "*" or "://" not in origin or origin.endswith("/"):
        raise InvalidInput(f"invalid --allow-origin {origin!r}: scheme://host[:port], no '*'")
    return origin


def listen(where: Bind) -> list[socket.socket]:
    """Bound sockets for every address the host resolves to (``localhost``: 127.0.0.1 and ::1,
    as asyncio's create_server would); uvicorn listens on them. An error names the address."""
    socks: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(where.host, where.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError as exc:
        for sock in socks:
            sock.close()
        reason = exc.strerror or exc.__class__.__name__
        raise InvalidInput(f"cannot listen on {where}: {reason.lower()}") from None
    return socks


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(0)


def serve(settings: config.Settings, bind: str = DEFAULT_BIND, token_file: str | None = None,
          allow_origins: tuple[str, ...] = (), request_timeout: float = REQUEST_TIMEOUT,
          max_connections: int | None = None, worker_token_file: str | None = None) -> None:
    import setproctitle
    import uvicorn

    from jobrun.web import console
    from jobrun.web.app import create_app
    from jobrun.web.connections import Admission, Limits, descriptor_limit

    where = parse_bind(bind)
    token = read_token(token_file) if token_file else None
    from jobrun.web import workertokens

    worker_tokens = workertokens.read(worker_token_file) if worker_token_file else None
    if not where.loopback and token is None:
        raise InvalidInput(f"refusing to serve on {where.host}, which is not loopback, without"
                           " a token: give --token-file")
    if not request_timeout > 0:
        raise InvalidInput(f"invalid --request-timeout {request_timeout}: seconds, above 0")
    if max_connections is not None and max_connections < 1:
        raise InvalidInput(f"invalid --max-connections {max_connections}: 1 or more")
    origins = tuple(check_origin(o) for o in allow_origins)
    from jobrun import tracing

    tracing.configure("jobrun-web")  # OTEL_ENABLED=true: request spans over OTLP
    hosts = loopback_hosts(where.host, where.port) if where.loopback else frozenset()
    # The console's files at /, the guarded API at /api (jobrun/web/console).
    app = console.beside(create_app(settings, token=token, allow_origins=origins, hosts=hosts,
                                             worker_tokens=worker_tokens))
    limits = Limits.for_descriptors(descriptor_limit(), request_timeout, max_connections)
    socks = listen(where)
    setproctitle.setproctitle(f"jobrun web {where.host}:{where.port}")
    # At the cap uvicorn answers each request 503; connections.py closes what is past it.
    server = uvicorn.Server(uvicorn.Config(
        app, host=where.host, port=where.port, loop="uvloop", lifespan="on",
        http=Admission(limits).protocol(), limit_concurrency=limits.max_connections + 1,
        access_log=False, server_header=False, proxy_headers=False,
        log_config=logs.uvicorn_config(settings.log_format, settings.log_level),
        log_level=settings.log_level, timeout_graceful_shutdown=GRACEFUL_TIMEOUT))
    logging.getLogger("uvicorn.error").info(
        "jobrun web listening on http://%s (request timeout %g s, at most %d connections)",
        where, limits.request_timeout, limits.max_connections)
    # uvicorn re-raises the SIGTERM it handled once it has stopped: exit 0 then, as on SIGINT.
    signal.signal(signal.SIGTERM, _stopped)
    try:
        server.run(sockets=socks)
    except KeyboardInterrupt:
        pass
    finally:
        for sock in socks:
            sock.close()
    if not server.started:  # the app's startup failed; uvicorn has logged why
        raise SystemExit(3)
