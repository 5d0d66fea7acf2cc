"""Log set-up: JSON lines (the default) or plain text, on stderr, configured by create_app.

Our request middleware writes one line per request (request id, route, status, latency),
so uvicorn's own access log is switched off rather than duplicated.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

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


def setup_logging(settings: Settings) -> None:
    formatter: logging.Formatter = (
        JsonFormatter() if settings.log_format == "json" else TextFormatter()
    )
    root = logging.getLogger("iabma")
    root.setLevel(settings.log_level)
    root.propagate = False
    for h in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(h)
    handler = logging.StreamHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)
    root.addHandler(handler)
    logging.getLogger("uvicorn.access").disabled = True
    if settings.log_format == "json":
        for h in logging.getLogger("uvicorn").handlers:
            h.setFormatter(formatter)
