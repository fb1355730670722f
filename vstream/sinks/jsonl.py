"""JSON Lines output: one record per frame, one line per record, with optional rotation."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from vstream.errors import VstreamError
from vstream.sinks.base import Record, make_parents


def encode(record: Record) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"


class JsonLinesSink:
    """Writes frame records as JSON Lines to a file or to stdout.

    Each record is written as a whole line and the stream is flushed after
    every batch, so if a run stops midway the output holds only complete
    records. A file can be rotated by size (``rotate_bytes``) and/or age
    (``rotate_seconds``): the full file becomes ``PATH.1`` (older ones shift
    to ``.2`` .. ``.keep``, the oldest is deleted) and a new ``PATH`` starts;
    rotation happens between batches, never inside a record.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        append: bool = False,
        rotate_bytes: int | None = None,
        rotate_seconds: float | None = None,
        keep: int = 5,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self._owned = self.path is not None
        self.rotate_bytes = rotate_bytes
        self.rotate_seconds = rotate_seconds
        self.keep = keep
        self.records = 0
        if self.path is None:
            self._out: IO[str] = sys.stdout
        else:
            self._out = self._open("a" if append else "w")
        self._opened_at = time.monotonic()

    def _open(self, mode: str) -> IO[str]:
        assert self.path is not None
        try:
            make_parents(self.path)
            return self.path.open(mode, encoding="utf-8")
        except OSError as exc:
            raise VstreamError(f"cannot write output {self.path}: {exc.strerror}") from exc

    def send(self, records: Sequence[Record]) -> None:
        """Write ``records``; a failed write (full disk, closed pipe) fails the sink.

        A reader that went away (``BrokenPipeError``) is raised as it is, so
        that ``vstream run | head`` can stop quietly.
        """
        try:
            self._write_lines(records)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise VstreamError(
                f"cannot write {self.path or 'stdout'}: {exc.strerror or exc}"
            ) from None

    def _write_lines(self, records: Sequence[Record]) -> None:
        if self._due_for_rotation():
            self._rotate()
        self._out.write("".join(encode(r) for r in records))
        self._out.flush()
        self.records += len(records)

    def _due_for_rotation(self) -> bool:
        if self.path is None:
            return False
        if self.rotate_bytes is not None and self._out.tell() >= self.rotate_bytes:
            return True
        return (
            self.rotate_seconds is not None
            and time.monotonic() - self._opened_at >= self.rotate_seconds
            and self._out.tell() > 0
        )

    def _rotate(self) -> None:
        assert self.path is not None
        self._out.close()
        rotated = [self.path.with_name(f"{self.path.name}.{n}") for n in range(1, self.keep + 1)]
        rotated[-1].unlink(missing_ok=True)
        for older, newer in zip(reversed(rotated[1:]), reversed(rotated[:-1]), strict=True):
            if newer.exists():
                newer.rename(older)
        self.path.rename(rotated[0])
        self._out = self._open("w")
        self._opened_at = time.monotonic()

    def close(self, timeout: float = 0.0) -> int:
        if self._owned:
            self._out.close()
        else:
            self._out.flush()
        return 0

    def __enter__(self) -> JsonLinesSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
