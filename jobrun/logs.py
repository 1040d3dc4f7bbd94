"""Structured logs: one stable event name plus fields per line, as text or JSON.

    from jobrun.logs import event
    event(log, logging.ERROR, "child.killed", child=3, signal="SIGKILL", hint="perhaps out of memory")

text: ``2026-11-29T12:00:00.123Z ERROR child.killed child=3 signal=SIGKILL hint="perhaps ..."``
json: ``{"ts": "...", "level": "error", "event": "child.killed", "child": 3, ...}``
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


def event(logger: logging.Logger, level: int, name: str, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={"jobrun_fields": fields})


def _stamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def _text_value(value: Any) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n\t'):
        return json.dumps(text, ensure_ascii=False)
    return text


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "jobrun_fields", {})
        parts = [_stamp(record), record.levelname, record.getMessage()]
        parts += [f"{k}={_text_value(v)}" for k, v in fields.items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": _stamp(record), "level": record.levelname.lower(), "event": record.getMessage(),
               "logger": record.name}
        doc.update(getattr(record, "jobrun_fields", {}))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


def setup(fmt: str = "text", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("jobrun")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
