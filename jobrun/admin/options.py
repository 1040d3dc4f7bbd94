"""The ``jobrun`` command line's global options (``--dsn``, ``--schema``, ``--json``) and the
session they select, shared by every sub-command module.

The options go before the command (``jobrun --json stats``) or after it (``jobrun stats
--json``); a value given after the command wins (:func:`session` merges them). With no
database URL anywhere, the session uses the embedded PostgreSQL under the state directory and
migrates it on first use, so ``jobrun enqueue`` works with no setup; an explicit URL is never
migrated implicitly: that is ``jobrun migrate``'s job.

:mod:`jobrun.admin.cli` builds the app from the sub-command modules (``ops_cli``,
``observe_cli``, ``queue_cli``, ``schedule_cli``); they import this module and
:mod:`jobrun.admin.output`, never ``cli``, so the imports run one way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Optional

import psycopg
import typer

from jobrun import config, observe
from jobrun.client import Client
from jobrun.redact import redact
from jobrun.store import db
from jobrun.store import migrate as migrations

_GLOBAL = "Global options"
Dsn = Annotated[Optional[str], typer.Option(
    "--dsn", metavar="URL", show_default=False, rich_help_panel=_GLOBAL,
    help="PostgreSQL URL (default: JOBRUN_DATABASE_URL, the config file, else embedded).")]
Schema = Annotated[Optional[str], typer.Option(
    "--schema", metavar="NAME", show_default=False, rich_help_panel=_GLOBAL,
    help="Schema holding jobrun's tables (default: jobrun).")]
AsJson = Annotated[bool, typer.Option("--json", rich_help_panel=_GLOBAL,
                                      help="Machine-readable JSON output.")]
JobId = Annotated[int, typer.Argument(metavar="ID", help="Job id.", show_default=False)]
QueueName = Annotated[str, typer.Argument(metavar="NAME", help="Queue name.", show_default=False)]


@dataclass
class Session:
    """What the global options select, and the client built from them (once, lazily)."""

    dsn: str | None = None
    schema: str | None = None
    as_json: bool = False
    _client: Client | None = None
    _source: observe.Source | None = None

    def settings(self) -> config.Settings:
        return config.load({"database_url": self.dsn, "schema": self.schema})

    def client(self) -> Client:
        if self._client is None:
            settings = self.settings()
            if settings.database_url is None:
                url = config.resolve_dsn(settings)  # says where, when it creates one
                apply_migrations(url, settings.schema)
                settings = settings.replace(database_url=url)
            self._client = Client(settings=settings)
        return self._client

    def source(self) -> observe.Source:
        """A read-only connection for the observation commands (workers, logs, top)."""
        if self._source is None:
            client = self.client()
            self._source = observe.Source(client.dsn, client.queries)
        return self._source

    def target(self) -> str:
        return f"schema {self.client().settings.schema} at {redact(self.client().dsn)}"

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._source is not None:
            self._source.close()


def session(ctx: typer.Context, dsn: str | None, schema: str | None, as_json: bool) -> Session:
    """Merge a command's own global options over those given before the command."""
    root = ctx.find_root()
    if not isinstance(root.obj, Session):
        root.obj = Session()
        root.call_on_close(root.obj.close)
    s: Session = root.obj
    s.dsn = dsn if dsn is not None else s.dsn
    s.schema = schema if schema is not None else s.schema
    s.as_json = s.as_json or as_json
    return s


def apply_migrations(url: str, schema: str) -> list[int]:
    """Migrate ``schema`` at ``url``; the versions applied (none: it was current)."""
    try:
        with db.connect(url) as conn:
            return migrations.migrate(conn, schema)
    except psycopg.Error as exc:
        raise db.translate(exc, url, schema) from None
