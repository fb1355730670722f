"""Log output: one line of text, or one JSON object a line, never with credentials.

Every record passes through :func:`vstream.uri.redact_uri` at the handler, so
a URL with a user name and password is masked whichever library logged it.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
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


class Tally:
    """Counts repeats of something worth a log line and says when to write one.

    At most one line per ``interval`` seconds, carrying the count since the
    last one, so that a fault repeated thousands of times a second costs a
    line every few seconds and still shows how often it happened. Not locked:
    callers counting from several threads hold a lock of their own.
    """

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._unlogged = 0
        self._logged_at = float("-inf")

    def add(self, count: int = 1) -> int:
        """Count ``count`` more; how many to report now (since the last line), or 0: stay quiet."""
        self._unlogged += count
        now = time.monotonic()
        if now - self._logged_at < self.interval:
            return 0
        count, self._unlogged, self._logged_at = self._unlogged, 0, now
        return count


class RepeatFilter(logging.Filter):
    """Lets one record of a kind through per ``interval`` seconds; the next says how many were held.

    A kind is the logger and the message before its arguments are merged in
    (``extra={"repeat_key": ...}`` names one instead), so ``"%s: connection
    refused"`` from a thousand clients is one kind. For loggers that anyone
    able to reach the daemon can make write, such as the HTTP server's: a
    flood of bad requests or failed accepts costs a line per interval, not a
    line (or a traceback) each. At most ``kinds`` kinds are followed; the
    one seen least recently is forgotten first.
    """

    def __init__(self, interval: float = 10.0, kinds: int = 256) -> None:
        super().__init__()
        self.interval = interval
        self.kinds = kinds
        self._tallies: dict[tuple[str, str], Tally] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(getattr(record, "repeat_key", record.msg)))
        with self._lock:
            tally = self._tallies.pop(key, None) or Tally(self.interval)
            self._tallies[key] = tally  # the most recently seen last
            if len(self._tallies) > self.kinds:
                del self._tallies[next(iter(self._tallies))]
            count = tally.add()
        if count > 1:
            record.msg = f"{record.msg} (and {count - 1} more like it, not shown)"
        return count > 0


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
