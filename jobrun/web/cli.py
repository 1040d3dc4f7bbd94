"""The `jobrun web` command (registered in jobrun.admin.cli)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from jobrun import config
from jobrun.web import DEFAULT_BIND, REQUEST_TIMEOUT


def web(
    ctx: typer.Context,
    bind: Annotated[str, typer.Option(metavar="HOST:PORT", help="Address to listen on.")]
    = DEFAULT_BIND,
    token_file: Annotated[Optional[str], typer.Option(
        "--token-file", metavar="PATH", show_default=False,
        help="File holding the bearer token every request but /api/v1/healthz must carry"
             " (required to bind a non-loopback address).")] = None,
    worker_token_file: Annotated[Optional[str], typer.Option(
        "--worker-token-file", metavar="PATH", show_default=False,
        help="File of worker tokens, one a line with the queues it may serve:"
             " 'TOKEN queue,queue' (docs/workers-anywhere.md).")] = None,
    allow_origin: Annotated[Optional[list[str]], typer.Option(
        "--allow-origin", metavar="ORIGIN", show_default=False,
        help="Repeatable: a browser origin (scheme://host:port) allowed to change things"
             " (added to the web_allow_origins setting).")]
    = None,
    request_timeout: Annotated[float, typer.Option(
        "--request-timeout", metavar="SECONDS",
        help="Close a connection that has not sent a whole request (headers and body) within"
             " this, and one whose client reads nothing of its response for this long.")]
    = REQUEST_TIMEOUT,
    max_connections: Annotated[Optional[int], typer.Option(
        "--max-connections", metavar="N", show_default=False,
        help="Answer 503 past this many open connections (default: what the file-descriptor"
             " limit allows, less a margin).")] = None,
    dsn: Annotated[Optional[str], typer.Option("--dsn", metavar="URL", show_default=False,
                                               help="PostgreSQL URL.")] = None,
    schema: Annotated[Optional[str], typer.Option("--schema", metavar="NAME",
                                                  show_default=False)] = None,
) -> None:
    """Serve the HTTP/JSON API (/api/v1) until SIGINT or SIGTERM."""
    session = ctx.find_root().obj  # the global options given before the command
    settings = config.load({"database_url": dsn or getattr(session, "dsn", None),
                            "schema": schema or getattr(session, "schema", None)})
    settings = settings.replace(database_url=config.resolve_dsn(settings))
    from jobrun.web.server import serve  # FastAPI is imported by this command alone

    origins = tuple(dict.fromkeys([*settings.web_allow_origins, *(allow_origin or ())]))
    serve(settings, bind, token_file, origins, request_timeout, max_connections,
          worker_token_file)
