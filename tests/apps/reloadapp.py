"""The test app, importable or not at will: its import fails while the file named by
RELOADAPP_BROKEN_IF exists (new code that does not load, for the reload tests)."""

from __future__ import annotations

import os
from pathlib import Path

_flag = os.environ.get("RELOADAPP_BROKEN_IF")
if _flag and Path(_flag).exists():
    raise ImportError("reloadapp is broken on purpose (its flag file exists)")

from tests.apps.taskapp import app  # noqa: E402,F401
