"""The master's exit codes, and what a child's exit status means to a reader."""

from __future__ import annotations

import signal

EXIT_OK = 0
EXIT_FATAL = 1  # a part crashed, or children keep dying before they are ready
EXIT_BOOT_ERROR = 3  # the app cannot be imported: a supervisor must not restart in a loop


def describe_exit(status: int) -> tuple[str, bool]:
    """A human description of a child's exit status, and whether it was by SIGKILL."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"killed by {name}", -status == signal.SIGKILL
    return f"exited with code {status}", False
