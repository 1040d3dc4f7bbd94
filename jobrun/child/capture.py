"""Per-attempt log capture in the child: what a handler logs (and, optionally, prints).

Records reach the capture through a handler on the root logger; prints are teed, so they still
reach the child's stdout (the master's journal). The text kept per attempt is bounded: past
``limit`` bytes the rest is counted and dropped, with a marker saying how much.

The attempt being captured is a context variable, not a global: a child running several jobs
at once (``--slots``: asyncio tasks, pool threads) keeps each job's lines in its own buffer,
whichever of them logs or prints.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import logging
import sys
from typing import Iterator, TextIO

DEFAULT_LIMIT = 64 * 1024
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Buffer:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0
        self.dropped = 0

    def write(self, text: str) -> None:
        if not text:
            return
        room = self.limit - self.size
        if room <= 0:
            self.dropped += len(text.encode(errors="replace"))
            return
        data = text.encode(errors="replace")
        if len(data) > room:
            self.dropped += len(data) - room
            text = data[:room].decode(errors="ignore")
        self.parts.append(text)
        self.size += min(len(data), room)

    def text(self) -> str | None:
        if not self.parts and not self.dropped:
            return None
        out = "".join(self.parts).replace("\x00", "\\0")
        if self.dropped:
            out += f"\n[... {self.dropped} more bytes of log dropped]\n"
        return out


# The attempt whose output is being captured here (this task's, this thread's), if any.
_CURRENT: contextvars.ContextVar[_Buffer | None] = contextvars.ContextVar(
    "jobrun_attempt_log", default=None)


class _Tee(io.TextIOBase):
    """stdout while a child runs jobs: everything still goes to the child's stdout, and what an
    attempt prints goes to that attempt's buffer too."""

    def __init__(self, original: TextIO) -> None:
        self.original = original

    def write(self, text: str) -> int:
        buffer = _CURRENT.get()
        if buffer is not None:
            buffer.write(text)
        return self.original.write(text)

    def flush(self) -> None:
        self.original.flush()

    def fileno(self) -> int:
        return self.original.fileno()

    def isatty(self) -> bool:
        return self.original.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.original.encoding


class _Handler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter(FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        buffer = _CURRENT.get()
        if buffer is not None:
            try:
                buffer.write(self.format(record) + "\n")
            except Exception:  # noqa: BLE001 - logging must never break the handler
                self.handleError(record)


class LogCapture:
    """Installed once per child; ``attempt()`` captures one attempt's output."""

    def __init__(self, limit: int = DEFAULT_LIMIT, capture_print: bool = True) -> None:
        self.limit = limit
        self.capture_print = capture_print
        self.handler = _Handler()
        root = logging.getLogger()
        root.addHandler(self.handler)
        if root.level > logging.INFO or root.level == logging.NOTSET:
            root.setLevel(logging.INFO)
        if not any(isinstance(h, logging.StreamHandler) and h is not self.handler
                   for h in root.handlers):
            # Keep warnings visible on stderr, as Python's last-resort handler would have.
            stderr = logging.StreamHandler(sys.stderr)
            stderr.setLevel(logging.WARNING)
            stderr.setFormatter(logging.Formatter(FORMAT))
            root.addHandler(stderr)

    @contextlib.contextmanager
    def attempt(self) -> Iterator[_Buffer]:
        """Capture what the current task or thread logs (and prints) into a new buffer."""
        buffer = _Buffer(self.limit)
        if self.capture_print and not isinstance(sys.stdout, _Tee):
            sys.stdout = _Tee(sys.stdout)  # once, at the first attempt (not in the fork server)
        token = _CURRENT.set(buffer)
        try:
            yield buffer
        finally:
            _CURRENT.reset(token)
