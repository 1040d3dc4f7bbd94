"""The systemd units: `systemd-analyze verify` accepts each, and they say what the docs say."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobrun.config import Settings

ROOT = Path(__file__).resolve().parents[2]
UNITS = ("jobrun-master.service", "jobrun-master@.service", "jobrun-web.service")
BIN = str(Path(sys.executable).parent) + "/"


def _read(name: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive
    parser.read_string((ROOT / "systemd" / name).read_text())
    return parser


def _seconds(text: str) -> float:
    return float(text[:-1]) * (60 if text.endswith("min") else 1) if text.endswith("s") else float(text)


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


@pytest.mark.parametrize("name", ["jobrun-master.service", "jobrun-master@.service"])
def test_master_units(name):
    s = _read(name)["Service"]
    assert s["Type"] == "notify" and s["NotifyAccess"] == "main"
    assert _seconds(s["WatchdogSec"]) > 0
    assert s["KillMode"] == "mixed"
    assert _seconds(s["TimeoutStopSec"]) > Settings().grace, "TimeoutStopSec must exceed the drain grace"
    assert s["Restart"] == "on-failure"
    assert "3" in s["RestartPreventExitStatus"].split()  # the app failed to load
    assert s["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert s["User"] == "jobrun"
    config = "/etc/jobrun/%i.toml" if "@" in name else "/etc/jobrun/jobrun.toml"
    assert s["ExecStart"].endswith(f"jobrun-master --config {config}")


@pytest.mark.parametrize("name", UNITS)
def test_hardening(name):
    s = _read(name)["Service"]
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "PrivateDevices",
                "RestrictSUIDSGID", "ProtectKernelTunables", "ProtectControlGroups"):
        assert s[key] == "yes", key
    assert s["ProtectSystem"] == "strict"
    assert s["CapabilityBoundingSet"] == ""
    assert s["User"] != "root"


def test_web_unit():
    s = _read("jobrun-web.service")["Service"]
    assert "jobrun web --bind 127.0.0.1:9120 --token-file /etc/jobrun/web.token" in s["ExecStart"]
    assert s["KillMode"] == "mixed" and s["Restart"] == "on-failure"


def test_master_accepts_config_flag(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('app = "x"\nconcurency = 3\n')
    done = subprocess.run([sys.executable, "-m", "jobrun.worker.cli", "--config", str(bad)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert "concurency" in done.stderr and str(bad) in done.stderr
