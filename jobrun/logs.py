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

from jobrun.redact import redact_text


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


class _Redacting(logging.Formatter):
    def formatException(self, ei) -> str:  # noqa: N802 - logging's name
        # A traceback repeats its error's text, which may hold a database URL.
        return redact_text(super().formatException(ei))


class TextFormatter(_Redacting):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "jobrun_fields", {})
        parts = [_stamp(record), record.levelname, record.getMessage()]
        parts += [f"{k}={_text_value(v)}" for k, v in fields.items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(_Redacting):
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


def uvicorn_config(fmt: str = "text", level: str = "info") -> dict[str, Any]:
    """A logging.config.dictConfig for a process that uvicorn runs (`jobrun web`): jobrun's
    events, uvicorn's own lines (start, stop, an exception it caught) and any library's
    warnings (the connection pool's) alike in jobrun's format on stderr, each event with its
    fields."""
    formatter = {"()": f"{__name__}.{'JsonFormatter' if fmt == 'json' else 'TextFormatter'}"}
    handler = {"class": "logging.StreamHandler", "formatter": "jobrun",
               "stream": "ext://sys.stderr"}
    one = {"handlers": ["jobrun"], "level": level.upper(), "propagate": False}
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"jobrun": formatter}, "handlers": {"jobrun": handler},
            "root": {"handlers": ["jobrun"], "level": "WARNING"},
            "loggers": {"jobrun": one, "uvicorn": one, "uvicorn.error": {"level": level.upper()},
                        "uvicorn.access": one}}
