"""bin/setup installs the runtime only; bin/test adds the test extras once (its own stamp).

The scripts run for real in a copy of bin/ and pyproject.toml, with a stand-in ``python``
that records what it is asked to do instead of creating a venv or installing anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A stand-in interpreter: ``-m venv DIR`` makes DIR/bin/python (itself); every call is logged.
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [ "$1" = "-c" ] && [ -n "${3:-}" ]; then exec python3 "$@"; fi  # bin/test reads pyproject
if [ "$1" = "-c" ]; then exit 0; fi
if [ "$*" = "-m pip install --quiet -r /dev/stdin" ]; then
    echo "requirements:" $(cat) >> "$FAKE_LOG"  # one line: the reader of the pipe logs too
fi
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
"""


def _copy(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "checkout"
    (root / "bin").mkdir(parents=True)
    for name in ("setup", "test"):
        shutil.copy2(ROOT / "bin" / name, root / "bin" / name)
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = dict(os.environ, PYTHON=str(fake), FAKE_LOG=str(tmp_path / "log"))
    return root, env


def _installs(tmp_path: Path) -> list[str]:
    """What pip was asked to install: ``-e PATH`` for jobrun, the requirements read otherwise."""
    log = tmp_path / "log"
    lines = log.read_text().splitlines() if log.exists() else []
    out = []
    for line in lines:
        if "pip install" in line and " -e " in line:
            out.append(line.split(" -e ", 1)[1])
        elif line.startswith("requirements:"):
            out.extend(line.split()[1:])
    return out


def test_setup_installs_the_runtime_and_test_adds_the_extras_once(tmp_path):
    root, env = _copy(tmp_path)
    subprocess.run([root / "bin" / "setup"], env=env, check=True, timeout=60)
    assert _installs(tmp_path) == [str(root)]
    subprocess.run([root / "bin" / "test", "--version"], env=env, check=True, timeout=60)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert _installs(tmp_path) == [str(root), *extras["test"]]
    assert "-m pytest --version" in (tmp_path / "log").read_text()
    subprocess.run([root / "bin" / "test", "-q"], env=env, check=True, timeout=60)
    assert _installs(tmp_path) == [str(root), *extras["test"]], "a second run installs nothing"


def test_the_licence_is_an_spdx_expression_setuptools_reads_without_a_warning():
    """A ``license = {text = ...}`` table makes setuptools >= 77 print a deprecation banner at
    every build; the SPDX string needs a setuptools that reads it."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "MIT"
    assert not any("License ::" in c for c in meta["project"].get("classifiers", []))
    assert meta["build-system"]["requires"] == ["setuptools>=77"]
