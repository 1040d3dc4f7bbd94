"""A real child process (python -m jobrun.child) fed job frames over a socketpair: output a
handler cannot send, and payloads it cannot decode, are failed attempts; the child lives on."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jobrun import protocol

ROOT = Path(__file__).resolve().parents[2]


class Child:
    def __init__(self) -> None:
        self.ours, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        env.pop("JOBRUN_DATABASE_URL", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobrun.child", "--fd", str(theirs.fileno()), "--index", "1",
             "--app", "tests.apps.outputapp", "--master-pid", str(os.getpid())],
            pass_fds=[theirs.fileno()], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        theirs.close()
        self.ours.settimeout(60)
        self.reader = protocol.FrameReader()
        self.frames: list[bytes] = []
        self.token = 0
        assert self.next()["t"] == "ready"

    def next(self) -> dict:
        while not self.frames:
            data = self.ours.recv(1 << 20)
            if not data:
                raise EOFError(f"child exited: {self.proc.wait(30)}, {self.proc.stderr.read()!r}")
            self.frames.extend(self.reader.feed(data))
        return protocol.decode(self.frames.pop(0))

    def run(self, task: str, payload_text: str = "null") -> dict:
        self.token += 1
        header = {"id": self.token, "token": self.token, "owner": "test", "task": task,
                  "queue": "default", "attempt": 1, "max_attempts": 3}
        self.ours.sendall(protocol.job_frame(header, payload_text))
        while True:
            frame = self.next()
            if frame["t"] == "result":
                assert frame["token"] == self.token
                return frame

    def close(self) -> None:
        self.ours.close()
        self.proc.wait(30)


@pytest.fixture
def child():
    c = Child()
    try:
        yield c
    finally:
        c.close()


def _alive_after(child: Child) -> None:
    assert child.proc.poll() is None
    assert child.run("ok")["outcome"] == "succeeded"


def test_exception_whose_str_raises(child):
    result = child.run("unprintable")
    assert result["outcome"] == "failed"
    assert result["error"].startswith("Unprintable")
    assert "str() failed" in result["error"]
    _alive_after(child)


@pytest.mark.parametrize("task", ["surrogate_result", "surrogate_log", "surrogate_error"])
def test_lone_surrogates(child, task):
    result = child.run(task)
    if task == "surrogate_result":
        assert result["outcome"] == "failed"
        assert "lone surrogate" in result["error"]
    elif task == "surrogate_log":
        assert result["outcome"] == "succeeded"
        assert "listing \\udcff" in result["log"]
    else:
        assert result["outcome"] == "failed"
        assert result["error"] == "ValueError: no such file: \\udcff"
    _alive_after(child)


def test_deeply_nested_result(child):
    result = child.run("deep_result")
    assert result["outcome"] == "failed"
    assert "nested deeper than" in result["error"]
    _alive_after(child)


def test_result_over_the_frame_limit(child):
    result = child.run("huge_result")
    assert result["outcome"] == "failed"
    assert "over the frame limit" in result["error"]
    _alive_after(child)


@pytest.mark.parametrize("payload", ["[" * 10_000 + "]" * 10_000, "1" * 5_001,
                                     '{"a": [' + "9" * 5_000 + "]}"])
def test_payload_python_cannot_decode(child, payload):
    result = child.run("echo", payload)
    assert result["outcome"] == "failed"
    assert result["permanent"] is True
    assert result["error"].startswith("payload cannot be decoded:")
    assert len(result["error"].splitlines()) == 1
    _alive_after(child)
