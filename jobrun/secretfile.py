"""Secrets read from files (a token for `jobrun web`, a worker's token, a file of worker tokens):
read whole, and refused when anyone but the owner may read them. Never a secret on a command
line; the errors name the file, never what is in it."""

from __future__ import annotations

import os
import stat

from jobrun.errors import InvalidInput


def read_private(path: str, where: str) -> str:
    """The text of ``path``; one line of InvalidInput (naming ``where``, e.g. "--token-file
    PATH") if it cannot be read or its group or others may read it."""
    try:
        info = os.stat(path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {where}: {exc.__class__.__name__}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidInput(f"{where} is readable by others: chmod 600 it")
    return text
