"""The master's exit codes, and what a child's exit status means to a reader."""

from __future__ import annotations

import signal

from jobrun import protocol

EXIT_OK = 0
EXIT_FATAL = 1  # a part crashed, or children keep dying before they are ready
# The app cannot be imported (a child's exit code, passed on): a supervisor such as systemd
# must not restart the master in a loop.
EXIT_BOOT_ERROR = protocol.EXIT_BOOT_ERROR


def describe_exit(status: int) -> tuple[str, bool]:
    """A human description of a child's exit status, and whether it was by SIGKILL."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"killed by {name}", -status == signal.SIGKILL
    return f"exited with code {status}", False
