"""The master <-> child wire format: length-prefixed frames over a Unix socketpair.

Each frame is a 4-byte big-endian length followed by a UTF-8 JSON object. The master builds
job frames by splicing the job's payload text (as PostgreSQL returned it) into the frame, so
it never parses or re-encodes payloads; only the child decodes them.

master -> child: {"t": "job", "id", "token", "owner", "task", "queue", "attempt",
                  "max_attempts", "priority", "created_at", "key", "payload": <raw JSON>}
                 (several job frames may come in one write: the child runs them in order)
                 a dependent released by its parents (workflows) has "parents": {id: result}
                 after its payload: the claim statement returns that tail with the payload
                 text, so the frame is built the same way for every job
                 {"t": "stop"}                      finish, then exit 0
                 {"t": "interrupt", "id", "token", "why"}  (a child with slots) stop that job:
                                                   why = lease_lost | cancel | timeout
child -> master: {"t": "ready", "pid", "rss", "tasks": {name: config}}
                 {"t": "result", "id", "token", "outcome", "result", "error", "traceback",
                  "delay", "permanent", "rss", "recycle", "recorded", "took"}
                 ("recorded": a transactional handler's child wrote the outcome itself;
                  "took": the run's seconds, as the child measured them; results of jobs
                  run back to back may come in one write)
                 {"t": "done", "id": [...], "token": [...], "took": [...], "result": [...]}
                                                   plain successes (nothing logged, no recycle),
                                                   in the order they ended: one frame for many
                 {"t": "alive"}                    while a job runs, every --alive-interval
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024

# The signals the master handles (docs/master.md). An exec'd child starts with each at its
# default (a handler does not survive exec); a forked child sets them so (child/forkserver.py).
MASTER_SIGNALS = ("TERM", "INT", "QUIT", "HUP", "TTIN", "TTOU")

# Child exit codes: a protocol between child and master.
EXIT_OK = 0
EXIT_BOOT_ERROR = 3  # the app failed to import: the master must stop, not respawn
EXIT_PROTOCOL_ERROR = 4


# One encoder for every frame: json.dumps with options builds a new one at each call.
_to_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def encode(obj: dict[str, Any]) -> bytes:
    body = _to_json(obj).encode()
    return HEADER.pack(len(body)) + body


def job_frame(header: dict[str, Any], payload_text: str) -> bytes:
    """A job frame: the header fields plus the payload spliced in as raw JSON text."""
    head = _to_json({"t": "job", **header})
    body = (head[:-1] + ',"payload":' + payload_text + "}").encode()
    return HEADER.pack(len(body)) + body


def interrupt_frame(job_id: int, token: int, why: str) -> bytes:
    """Ask a child with slots to stop one job (child/slots.py): a signal would reach whichever
    job its main thread runs."""
    return encode({"t": "interrupt", "id": job_id, "token": token, "why": why})


def _number(value: float) -> str:
    return repr(value) if math.isfinite(value) else _to_json(value)


class JobFrames:
    """The master's job frames, written field by field: what ``job_frame`` gives for the same
    header, at a fraction of its cost per job (no dict, no encoder pass; the names that repeat,
    owner, task and queue, are encoded once)."""

    def __init__(self, owner: str) -> None:
        self._owner = _to_json(owner)
        self._names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        text = self._names.get(name)
        if text is None:
            if len(self._names) >= 4096:  # names are few; never let hostile ones pile up
                self._names.clear()
            text = self._names[name] = _to_json(name)
        return text

    def frame(self, *, id: int, token: int, task: str, queue: str, attempt: int,
              max_attempts: int, priority: int, created_at: float, key: str | None,
              traceparent: str | None, payload_text: str) -> bytes:
        body = (f'{{"t":"job","id":{id:d},"token":{token:d},"owner":{self._owner},'
                f'"task":{self._name(task)},"queue":{self._name(queue)},"attempt":{attempt:d},'
                f'"max_attempts":{max_attempts:d},"priority":{priority:d},'
                f'"created_at":{_number(created_at)},'
                f'"key":{"null" if key is None else _to_json(key)},'
                f'"traceparent":{"null" if traceparent is None else _to_json(traceparent)},'
                f'"payload":{payload_text}}}').encode()
        return HEADER.pack(len(body)) + body


_decode = json.JSONDecoder().decode  # one decoder (json.loads looks its options up each call)


def decode(body: bytes) -> dict[str, Any]:
    """A frame's JSON (always UTF-8: a str decodes without json.loads' encoding sniffing)."""
    return _decode(body.decode())


_PAYLOAD_KEY = b',"payload":'


def decode_job(body: bytes) -> tuple[dict[str, Any], str | None]:
    """Decode a frame; for a job frame whose payload Python cannot decode (PostgreSQL stored
    JSON nested too deep for the parser, or an integer too long to convert), the header
    alone and a one-line reason, so the child can fail that job instead of dying.

    The payload comes last in every job frame (``JobFrames.frame``, ``job_frame``); the first
    ``,"payload":`` is its key, since inside a JSON string every '"' is escaped."""
    try:
        return decode(body), None
    except (ValueError, RecursionError) as exc:
        at = body.find(_PAYLOAD_KEY)
        if at < 0:
            raise
        header = decode(body[:at] + b"}")
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        return header, reason.splitlines()[0][:300]


class FrameReader:
    """Incremental frame parser for a non-blocking stream."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        frames = []
        while len(self._buf) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buf)
            if size > MAX_FRAME:
                raise ValueError(f"frame of {size} bytes exceeds the limit")
            end = HEADER.size + size
            if len(self._buf) < end:
                break
            frames.append(bytes(self._buf[HEADER.size:end]))
            del self._buf[:end]
        return frames
