"""Worker tokens: who may speak the worker protocol (/api/v1/workers), and in which queues.

A worker token is not the admin token (``--token-file``): it lets a remote worker register,
claim, renew and report, only in the queues it is scoped to, and nothing else of the API
(enqueue, cancel, reads: 403). Tokens are read from ``--worker-token-file PATH`` (owner-only
permissions, as the admin token's file), one token a line with the queues it serves::

    # token                          queues
    3f9c0a6d2b1e47f8a5c4d3e2f1a0b9c8 emails,reports
    b7e6d5c4a3b2c1d0e9f8a7b6c5d4e3f2 default

Blank lines and lines starting with ``#`` are skipped. A token is 16 or more characters
without spaces; a bad line is one error naming the file and the line number, never the
token. Tokens are never logged, echoed or put in an error.

:meth:`WorkerTokens.match` compares the offered token with every configured one in constant
time (``hmac.compare_digest``, all of them, whatever matched), so neither the time taken nor
the order of the file tells a caller how close a guess came.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from jobrun import validate
from jobrun.errors import InvalidInput
from jobrun.secretfile import read_private

PREFIX = "/api/v1/workers"
MIN_TOKEN = 16


@dataclass(frozen=True)
class WorkerScope:
    """What a request carrying a worker token may touch: the worker protocol, in ``queues``."""

    queues: frozenset[str]

    def covers(self, queues: list[str] | tuple[str, ...] | frozenset[str]) -> bool:
        return set(queues) <= self.queues


@dataclass(frozen=True)
class WorkerTokens:
    entries: tuple[tuple[bytes, WorkerScope], ...]

    def match(self, offered: str) -> WorkerScope | None:
        """The scope of the configured token equal to ``offered``, or None (constant time in
        the offered token: every entry is compared)."""
        given = offered.encode()
        found = None
        for token, scope in self.entries:
            if hmac.compare_digest(given, token) and found is None:
                found = scope
        return found


def is_protocol(method: str, path: str) -> bool:
    """Whether a request is part of the worker protocol: registering (POST /workers), or any
    call on one worker (/workers/{id}...). Reading the list of workers is not."""
    if path == PREFIX:
        return method == "POST"
    return path.startswith(PREFIX + "/")


def parse(text: str, where: str) -> WorkerTokens:
    entries: list[tuple[bytes, WorkerScope]] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise InvalidInput(f"{where} line {number}: a token and its queues"
                               " (queue,queue), separated by a space")
        token, queues = parts
        if len(token) < MIN_TOKEN:
            raise InvalidInput(f"{where} line {number}: the token must be {MIN_TOKEN} or more"
                               " characters")
        if token in seen:
            raise InvalidInput(f"{where} line {number}: the same token is given twice")
        seen.add(token)
        try:
            names = frozenset(validate.queue_name(q) for q in queues.split(","))
        except InvalidInput as exc:
            raise InvalidInput(f"{where} line {number}: {exc}") from None
        entries.append((token.encode(), WorkerScope(names)))
    if not entries:
        raise InvalidInput(f"{where}: no token in it")
    return WorkerTokens(tuple(entries))


def read(path: str) -> WorkerTokens:
    """The tokens of a ``--worker-token-file``; InvalidInput (one line) if it cannot be used."""
    where = f"--worker-token-file {path}"
    return parse(read_private(path, where), where)
