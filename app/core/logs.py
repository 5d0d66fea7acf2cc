"""Log set-up: JSON lines (the default) or plain text, on stderr, configured by create_app.

Our request middleware writes one line per request (request id, route, status, latency),
so uvicorn's own access log is switched off rather than duplicated.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from app.settings import Settings

FIELDS = ("request_id", "method", "route", "path", "status", "latency_ms", "model_version")
_HANDLER_NAME = "iabma"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in FIELDS:
            if hasattr(record, key):
                line[key] = getattr(record, key)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={getattr(record, k)}" for k in FIELDS if hasattr(record, k))
        return super().format(record) + (f" {extra}" if extra else "")


def _formatter(settings: Settings) -> type[logging.Formatter]:
    return JsonFormatter if settings.log_format == "json" else TextFormatter


def setup_logging(settings: Settings) -> None:
    formatter = _formatter(settings)()
    root = logging.getLogger("iabma")
    root.setLevel(settings.log_level)
    root.propagate = False
    for h in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(h)
    handler = logging.StreamHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)
    root.addHandler(handler)
    # Libraries' warnings and errors (SQLAlchemy's pool, asyncio) go to the root logger;
    # with no handler there, Python prints them as bare text amid the JSON lines.
    top = logging.getLogger()
    for h in [h for h in top.handlers if h.get_name() == _HANDLER_NAME]:
        top.removeHandler(h)
    top.addHandler(handler)
    logging.getLogger("uvicorn.access").disabled = True
    if settings.log_format == "json":
        for h in logging.getLogger("uvicorn").handlers:
            h.setFormatter(formatter)


def uvicorn_log_config(settings: Settings) -> dict[str, Any]:
    """uvicorn's logging in the configured format, for every process it starts: a server
    of several workers logs from a supervisor that never builds the app."""
    formatter = _formatter(settings)
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {_HANDLER_NAME: {"()": f"{__name__}.{formatter.__name__}"}},
        "handlers": {
            _HANDLER_NAME: {
                "class": "logging.StreamHandler",
                "formatter": _HANDLER_NAME,
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "uvicorn": {"handlers": [_HANDLER_NAME], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"level": "INFO", "propagate": False},
        },
    }


class AccessLog:
    """The one line per request, written without the logging module's machinery.

    A ``LogRecord``, its formatter and its handler's lock cost about 60 µs a request at
    thousands of requests a second; this writes the same line (JSON or text, as
    configured, on the same stream) in a few microseconds.
    """

    def __init__(self, settings: Settings) -> None:
        self.enabled = logging.getLevelName(settings.log_level) <= logging.INFO
        self.json = settings.log_format == "json"
        self._second = -1
        self._stamp = ""

    def now(self) -> str:
        """``datetime.now(UTC).isoformat(timespec="milliseconds")``, with the text up to
        the second made once a second: the datetime alone was half of this class's cost."""
        t = time.time()
        second = int(t)
        if second != self._second:
            self._stamp = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
            self._second = second
        return f"{self._stamp}.{int((t - second) * 1000):03d}+00:00"

    def write(self, method: str, path: str, status: int, fields: dict[str, Any]) -> None:
        if not self.enabled:
            return
        message = f"{method} {path} {status}"
        now = self.now()
        if self.json:
            line = {"ts": now, "level": "info", "logger": "iabma.request", "message": message}
            text = orjson.dumps({**line, **fields}, default=str).decode("utf-8")
        else:
            extra = " ".join(f"{k}={v}" for k, v in fields.items())
            text = f"{now} INFO iabma.request {message} {extra}"
        sys.stderr.write(text + "\n")  # stderr is line-buffered: one write a line
