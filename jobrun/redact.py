"""Passwords kept out of what jobrun shows: connection targets, error messages, process titles.

Below everything that shows a database URL (``jobrun.store.db``'s errors, the command lines,
``jobrun config show``, the master's process title): it imports nothing of jobrun, so any of
them uses it without pulling the settings or the connections in. A password can reach a
message in several forms (as typed, as libpq parsed it, %-decoded); :func:`redact_text`
replaces every one of them.
"""

from __future__ import annotations

import re
from urllib.parse import unquote


def redact(dsn: str) -> str:
    """Describe a connection target without its password: 'host:port/dbname'."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return "<unparsable database URL>"
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    db = params.get("dbname") or params.get("user") or ""
    return redact_text(f"{host}:{port}/{db}", dsn)


_URL_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?P<info>[^?#]*)@")  # up to the last '@'
_KEYWORD_PASSWORD = re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", re.I)
_ANY_URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]*:)[^\s\"']*@")


def _secrets(dsn: str) -> list[str]:
    """Every form the password of ``dsn`` may take in a message: as parsed, as typed (a
    password holding '@' or a bad %-escape is typed one way and parsed another), decoded."""
    from psycopg.conninfo import conninfo_to_dict

    found: set[str] = set()
    try:
        found.add(conninfo_to_dict(dsn).get("password") or "")
    except Exception:  # noqa: BLE001 - an unparsable URL still has a typed password
        pass
    url = _URL_USERINFO.match(dsn)
    if url:
        _, colon, typed = url.group("info").partition(":")
        if not colon:
            _, _, typed = url.group("info").partition("@")
        # A password holding '@' is cut at its first '@' by libpq; the rest reads as the host.
        found.update((typed, unquote(typed), *(piece + "@" for piece in typed.split("@")[1:])))
    for match in _KEYWORD_PASSWORD.finditer(dsn):
        found.add(match.group(1).strip("'"))
    return sorted((s for s in found if s), key=len, reverse=True)


def redact_text(text: str, dsn: str | None = None) -> str:
    """``text`` (an error message, say) with the password of ``dsn``, and any password written
    in a URL, replaced by '***'."""
    if dsn:
        for secret in _secrets(dsn):
            text = text.replace(secret, "***@" if secret.endswith("@") else "***")
    return _ANY_URL_PASSWORD.sub(r"\1***@", text)


def title_without_secrets(argv: list[str]) -> str:
    """A process title from ``argv`` with the value of --dsn hidden."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
        elif arg == "--dsn":
            out.append(arg)
            hide_next = True
        elif arg.startswith("--dsn="):
            out.append("--dsn=***")
        else:
            out.append(redact_text(arg))
    return " ".join(out)
