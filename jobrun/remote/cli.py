"""`jobrun worker`: the remote worker's command (registered in jobrun.admin.cli)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Optional

import typer

from jobrun.errors import InvalidInput
from jobrun.secretfile import read_private


def read_token(path: str) -> str:
    """The token in ``path`` (its first line), which only its owner may read."""
    token = read_private(path, f"--token-file {path}").strip()
    if not token or any(c.isspace() for c in token):
        raise InvalidInput(f"--token-file {path}: one token, no spaces")
    return token


def worker(
    url: Annotated[str, typer.Option("--url", metavar="URL",
                                     help="The jobrun web server, e.g. https://jobs.example:9120")],
    app_spec: Annotated[str, typer.Option("-A", "--app", metavar="MODULE[:ATTR]",
                                          help="The app whose @app.task handlers to run.")],
    token_file: Annotated[Optional[str], typer.Option(
        "--token-file", metavar="PATH", show_default=False,
        help="File holding this worker's token (a line of the server's --worker-token-file).")]
    = None,
    slots: Annotated[int, typer.Option("--slots", "-c", metavar="N",
                                       help="Jobs run at once (the credits it registers).")] = 4,
    queue: Annotated[Optional[list[str]], typer.Option(
        "-Q", "--queue", metavar="NAME", show_default=False,
        help="Repeatable: a queue to serve (default: the queues of the app's tasks).")] = None,
    name: Annotated[Optional[str], typer.Option(
        "--name", metavar="NAME", show_default=False,
        help="Shown in `jobrun workers` (default: the host name).")] = None,
    grace: Annotated[float, typer.Option("--grace", metavar="SECONDS",
                                         help="At SIGTERM, time running jobs get to finish.")]
    = 30.0,
) -> None:
    """Run an app's handlers on this machine, with no database connection, over `jobrun web`'s
    worker protocol (claims, lease renewals, outcomes). Stops on SIGTERM or SIGINT."""
    import logging

    from jobrun import logs
    from jobrun.app import load_app
    from jobrun.remote.worker import Options, RemoteWorker

    token = read_token(token_file) if token_file else "-"
    try:
        app = load_app(app_spec)
    except (ImportError, LookupError) as exc:
        raise InvalidInput(f"cannot load -A {app_spec}: {exc}") from None
    options = Options(url=url, token=token, slots=slots, queues=tuple(queue or ()), grace=grace)
    if name:
        options.name = name
    try:
        remote = RemoteWorker(app, options)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    if not logging.getLogger().handlers:
        logs.setup()
    asyncio.run(remote.run())
