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


def _dsn_values(argv: list[str]) -> set[int]:
    """The positions in ``argv`` that hold the value of a --dsn."""
    return {i + 1 for i, arg in enumerate(argv) if arg == "--dsn"} | {
        i for i, arg in enumerate(argv) if arg.startswith("--dsn=")}


def _escaped(arg: str) -> str:
    """``arg`` as text: a byte that is not UTF-8 (Python keeps it as a lone surrogate in
    sys.argv) written as its escape, '\\xff'."""
    try:
        raw = arg.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no decoding made
        return arg.encode("utf-8", "backslashreplace").decode()
    return raw.decode("utf-8", "backslashreplace")


def title_without_secrets(argv: list[str]) -> str:
    """A process title from ``argv`` with the value of --dsn hidden (and any byte that is not
    UTF-8 escaped: the title must be text)."""
    hidden = _dsn_values(argv)
    return " ".join("--dsn=***" if i in hidden and arg.startswith("--dsn=") else
                    "***" if i in hidden else _escaped(redact_text(arg))
                    for i, arg in enumerate(argv))


def undecodable_argument(argv: list[str]) -> str | None:
    """Why a command line cannot be taken, or None: its first argument holding a byte that is
    not UTF-8 (names, payloads, URLs and settings are all text), shown escaped (a --dsn
    value only by name: it may hold a password)."""
    hidden = _dsn_values(argv)
    for i, arg in enumerate(argv):
        if arg.isascii() or _escaped(arg) == arg:  # no lone surrogate
            continue
        if i in hidden:
            return "the value of --dsn is not valid UTF-8"
        shown = "".join(c if c.isprintable() else repr(c)[1:-1]  # one line: \n as '\n'
                        for c in _escaped(redact_text(arg)))
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return f"argument {i + 1} ('{shown}') is not valid UTF-8"
    return None
