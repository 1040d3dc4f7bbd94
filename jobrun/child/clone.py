"""Whether this machine can fork children the fork server's way (the ``clone`` system call with
CLONE_PARENT: jobrun/child/forkserver.py). A module of its own so that the master's command
line can ask before it imports anything heavier."""

from __future__ import annotations

import os
import sys

CLONE_PARENT = 0x00008000
SYS_CLONE = {"x86_64": 56, "aarch64": 220, "arm64": 220}


def machine() -> str:
    """The hardware name (``platform.machine()`` without the import: it is uname's field)."""
    return os.uname().machine


def unsupported() -> str | None:
    """None when this machine can fork children as the master's own; else why not."""
    if not sys.platform.startswith("linux"):
        return "the fork server needs Linux (clone with CLONE_PARENT)"
    if machine() not in SYS_CLONE:
        return f"the fork server does not know the clone system call on {machine()}"
    return None
