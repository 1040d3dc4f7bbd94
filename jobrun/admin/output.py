"""How the ``jobrun`` commands print: single objects as JSON, lists as tables, notes on stderr.

``--json`` makes everything JSON (:func:`emit`); a note (``jobrun: ...`` on stderr) never
mixes with what a script reads from stdout. Shared by :mod:`jobrun.admin.cli` and its
sub-command modules.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def emit(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False, default=_json_default))


def note(message: str) -> None:
    typer.echo(f"jobrun: {message}", err=True)


def table(columns: list[str], rows: list[list[Any]], empty: str) -> None:
    # When piped, rich would wrap at 80 columns; a wide console keeps one row per line.
    console = Console(width=None if sys.stdout.isatty() else 250)
    grid = Table(*columns, box=box.SIMPLE_HEAD, show_edge=False)
    for row in rows:
        grid.add_row(*("" if v is None else str(v) for v in row))
    if rows:
        console.print(grid)
    else:
        console.print(empty)


def timestamp(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else ""
