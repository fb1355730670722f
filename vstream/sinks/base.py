"""What every sink shares: the record type, the transport contract, delivery errors.

A *transport* knows how to put records somewhere (a file, a broker, a URL);
:class:`~vstream.sinks.buffered.BufferedSink` runs one off the inference
thread with a bounded buffer, retries and counters.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

from vstream.config.sinks import fill

Record = dict[str, Any]
"""One frame's record, as :meth:`vstream.results.FrameResult.to_record` makes it."""


def encode_records(records: Record | Sequence[Record]) -> bytes:
    """A record (or a list of them) as compact JSON in UTF-8: the bytes every sink sends.

    orjson, not the standard library's encoder: at a thousand frames a second
    encoding the records held about 7 % of one process's GIL (BENCHMARKS.md,
    sixth H100 run), and orjson takes about a fifteenth of the time. JSON has no
    NaN or infinity: such a number (a broken model's box) is written as ``null``.
    Keys that are not strings are written as strings, as the standard library does.
    """
    if not isinstance(records, dict):
        records = list(records)
    return orjson.dumps(records, option=orjson.OPT_NON_STR_KEYS)


def make_parents(path: Path) -> None:
    """Create the missing directories above ``path``, as ``mkdir -p`` does.

    An ancestor that is a file is reported as "Not a directory" (what the
    open would have said), not as ``FileExistsError``.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(path.parent)) from None


class DeliveryError(Exception):
    """A transport could not deliver all of a batch.

    ``delivered`` records at the head of the batch did get through and must
    not be sent again; ``retryable`` is False when sending the rest again
    cannot help (e.g. an HTTP 400), so the rest is dropped and counted.
    """

    def __init__(self, message: str, *, delivered: int = 0, retryable: bool = True) -> None:
        super().__init__(message)
        self.delivered = delivered
        self.retryable = retryable


class Transport(Protocol):
    """Puts batches of records somewhere.

    Raising :class:`DeliveryError` means "not (all) delivered, try again"
    (or, with ``retryable=False``, "rejected"); raising anything else means
    the transport cannot work, and its sink fails.
    """

    def send(self, records: Sequence[Record]) -> None: ...

    def close(self, timeout: float) -> int:
        """Release resources; return how many accepted records were never confirmed."""
        ...


def stream_key(template: str, record: Record, pipeline: str) -> str:
    """A per-stream topic or key from a template with ``{stream}`` and ``{pipeline}``."""
    return fill(template, stream=str(record.get("stream", "")), pipeline=pipeline)
