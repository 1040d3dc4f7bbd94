"""The systemd units pass `systemd-analyze verify` (tests/unit/test_units.py reads what they
say), and `jobrun-master --config` names a bad key of the file it was given."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = ("jobrun-master.service", "jobrun-master@.service", "jobrun-web.service")
BIN = str(Path(sys.executable).parent) + "/"


@pytest.mark.parametrize("name", UNITS)
def test_systemd_analyze_verify(name, tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian package: systemd)")
    # The units name /opt/jobrun/venv; point them at this checkout's environment instead so
    # that verify can check the executables exist.
    text = (ROOT / "systemd" / name).read_text().replace("/opt/jobrun/venv/bin/", BIN)
    target = tmp_path / name.replace("@.", "@emails.")  # a template is verified as an instance
    target.write_text(text)
    done = subprocess.run([tool, "verify", str(target)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    # Unknown keys and bad values are only warnings: none may appear.
    complaints = [line for line in done.stderr.splitlines() if target.name in line]
    assert not complaints, "\n".join(complaints)


def test_verify_catches_a_bad_unit(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian package: systemd)")
    bad = tmp_path / "bad.service"
    bad.write_text(f"[Service]\nType=notify\nExecStart={BIN}jobrun-master\nWatchdogSecs=5s\n")
    done = subprocess.run([tool, "verify", str(bad)], capture_output=True, text=True, timeout=120)
    assert "WatchdogSecs" in done.stderr


def test_master_accepts_config_flag(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('app = "x"\nconcurency = 3\n')
    done = subprocess.run([sys.executable, "-m", "jobrun.worker.cli", "--config", str(bad)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert "concurency" in done.stderr and str(bad) in done.stderr
