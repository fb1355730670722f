"""Log output: one line of text, or one JSON object a line, never with credentials.

Every record passes through :func:`vstream.uri.redact_uri` at the handler, so
a URL with a user name and password is masked whichever library logged it.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import IO

from vstream.uri import redact_uri

LEVELS = ("debug", "info", "warning", "error")


class RedactingFilter(logging.Filter):
    """Masks credentials in the message (with its arguments merged in)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        record.msg, record.args = redact_uri(message), None
        return True


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message"}`` (and ``"exception"``) on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = redact_uri(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``vstream: message``, optionally after a time stamp and level (for the daemon)."""

    def __init__(self, timestamps: bool) -> None:
        fmt = "%(asctime)s %(levelname)s %(message)s" if timestamps else "vstream: %(message)s"
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        return redact_uri(super().format(record))


def setup_logging(
    format: str = "text",
    level: str = "info",
    *,
    timestamps: bool = False,
    stream: IO[str] | None = None,
) -> None:
    """Send every log record to stderr in ``format`` (``text`` or ``json``) from ``level`` up."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter() if format == "json" else TextFormatter(timestamps))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn", "uvicorn.error", "uvicorn.access", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
