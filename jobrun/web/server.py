"""`jobrun web`: the HTTP API as its own process (uvicorn on uvloop, one connection pool).

Loopback by default. A bind to any other address is refused unless a token is configured
(``--token-file``, a file readable by its owner only); the token is read once and never
printed, logged or put in the process title.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import stat
from dataclasses import dataclass

from jobrun import config, logs
from jobrun.errors import InvalidInput
from jobrun.web import DEFAULT_BIND
from jobrun.web.guard import loopback_hosts


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


def parse_bind(text: str) -> Bind:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInput(f"invalid --bind {text!r}: HOST:PORT, e.g. {DEFAULT_BIND}")
    return Bind(host, int(port))


def read_token(path: str) -> str:
    try:
        info = os.stat(path)
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read --token-file {path}: {exc.__class__.__name__}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidInput(f"--token-file {path} is readable by others: chmod 600 it")
    if len(token) < 16 or any(c.isspace() for c in token):
        raise InvalidInput(f"--token-file {path}: the token must be 16 or more characters,"
                           " no spaces")
    return token


def check_origin(origin: str) -> str:
    if origin == "*" or "://" not in origin or origin.endswith("/"):
        raise InvalidInput(f"invalid --allow-origin {origin!r}: scheme://host[:port], no '*'")
    return origin


def serve(settings: config.Settings, bind: str = DEFAULT_BIND, token_file: str | None = None,
          allow_origins: tuple[str, ...] = ()) -> None:
    import setproctitle
    import uvicorn

    from jobrun.web import console
    from jobrun.web.app import create_app

    where = parse_bind(bind)
    token = read_token(token_file) if token_file else None
    if not where.loopback and token is None:
        raise InvalidInput(f"refusing to serve on {where.host}, which is not loopback, without"
                           " a token: give --token-file")
    origins = tuple(check_origin(o) for o in allow_origins)
    hosts = loopback_hosts(where.host, where.port) if where.loopback else frozenset()
    # The console's files at /, the guarded API at /api (jobrun/web/console).
    app = console.beside(create_app(settings, token=token, allow_origins=origins, hosts=hosts))
    setproctitle.setproctitle(f"jobrun web {where.host}:{where.port}")
    uvicorn.run(app, host=where.host, port=where.port, loop="uvloop", lifespan="on",
                access_log=False, server_header=False, proxy_headers=False,
                log_config=logs.uvicorn_config(settings.log_format, settings.log_level),
                log_level=settings.log_level, timeout_graceful_shutdown=10)
