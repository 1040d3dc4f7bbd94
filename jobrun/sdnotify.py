"""systemd's notify protocol, for any jobrun process run as a Type=notify service.

``Notify`` is a small client of ``$NOTIFY_SOCKET`` (a path, or an abstract name written with a
leading ``@``): one datagram per message, ``KEY=value`` lines. Without the variable every call
is a no-op, so a process runs the same under systemd, a terminal or a test. ``from_env`` takes
NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID out of the environment, so that child processes
(which inherit it) never talk to systemd themselves. The master's use of it is
``jobrun.worker.sdnotify``; ``jobrun web`` sends READY, WATCHDOG and STOPPING (``ping``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any, MutableMapping

from jobrun.logs import event

log = logging.getLogger("jobrun.systemd")

ENV_KEYS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notify:
    """Send sd_notify messages to one socket address; a no-op when ``address`` is None."""

    def __init__(self, address: str | None, watchdog_usec: int = 0) -> None:
        self.address: str | bytes | None = None
        if address:
            # "@name" is an abstract socket: a leading NUL byte on Linux.
            self.address = "\0" + address[1:] if address.startswith("@") else address
        self.watchdog_usec = watchdog_usec
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(cls, environ: MutableMapping[str, str] = os.environ) -> "Notify":
        """Read (and remove) the systemd variables; the watchdog only if it is meant for us."""
        values = {key: environ.pop(key, None) for key in ENV_KEYS}
        usec = 0
        pid = values["WATCHDOG_PID"]
        if values["WATCHDOG_USEC"] and (not pid or pid == str(os.getpid())):
            try:
                usec = max(0, int(values["WATCHDOG_USEC"]))
            except ValueError:
                usec = 0
        return cls(values["NOTIFY_SOCKET"], usec)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: Any) -> bool:
        """Send ``KEY=value`` lines (keys upper-cased); False if nothing could be sent."""
        if self.address is None:
            return False
        message = "\n".join(f"{key.upper()}={value}" for key, value in fields.items())
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(message.encode(), self.address)
            return True
        except OSError as exc:  # systemd gone or the socket full: never fatal for the master
            event(log, logging.DEBUG, "systemd.notify_failed", error=str(exc))
            return False

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def monotonic_usec() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


async def ping(notify: Notify) -> None:
    """WATCHDOG=1 every half WATCHDOG_USEC, from the event loop (a stalled loop pings no more,
    and systemd restarts the process); returns at once without a watchdog."""
    if not notify.watchdog_usec:
        return
    while True:
        notify.send(watchdog=1)
        await asyncio.sleep(notify.watchdog_usec / 2e6)
