"""What ``jobrun web`` loads, probed in a fresh interpreter: it serves the read model
(jobrun/observe.py) and must not load the operator's command line (jobrun.admin), its terminal
library (rich) or termios to get it. The twin shows the probe sees them where they are loaded.
Which way the modules import each other is checked statically
(tests/unit/test_import_directions.py).
"""

from __future__ import annotations

import subprocess
import sys

NOT_FOR_THE_WEB = ("jobrun.admin", "rich", "termios")


def loaded_by(module: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules under ``prefixes`` that importing ``module`` loads in a fresh interpreter."""
    code = (f"import sys, {module}; print(' '.join(sorted(m for m in sys.modules"
            f" if m.split('.')[0] in {prefixes!r} or m.startswith({prefixes!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return out.split()


def test_the_web_loads_neither_the_command_line_nor_the_terminal() -> None:
    assert loaded_by("jobrun.web.app", NOT_FOR_THE_WEB) == []


def test_the_probe_sees_what_the_terminal_view_loads() -> None:
    loaded = loaded_by("jobrun.admin.top", NOT_FOR_THE_WEB)
    assert {"jobrun.admin", "jobrun.admin.top", "rich", "termios"} <= set(loaded)
