"""The systemd units say what the docs say (tests/acceptance/test_units_verify.py runs
`systemd-analyze verify` on each)."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from jobrun.config import Settings

ROOT = Path(__file__).resolve().parents[2]
UNITS = ("jobrun-master.service", "jobrun-master@.service", "jobrun-web.service")


def _read(name: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive
    parser.read_string((ROOT / "systemd" / name).read_text())
    return parser


def _seconds(text: str) -> float:
    return float(text[:-1]) * (60 if text.endswith("min") else 1) if text.endswith("s") else float(text)


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


@pytest.mark.parametrize("name", UNITS)
def test_descriptor_limit_is_set(name):
    # The default soft limit (1,024) is what about 1,100 idle connections exhausted.
    assert int(_read(name)["Service"]["LimitNOFILE"]) >= 8192


def test_web_unit_caps_connections_below_its_descriptors():
    from jobrun.web.connections import RESERVED_FDS, Limits

    nofile = int(_read("jobrun-web.service")["Service"]["LimitNOFILE"])
    limits = Limits.for_descriptors(nofile)
    assert 5000 < limits.max_connections
    assert limits.max_connections + limits.overflow + RESERVED_FDS <= nofile
