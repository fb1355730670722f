"""JSON Lines output: one record per frame, one line per record."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO

from vstream.errors import VstreamError
from vstream.results import FrameResult


class JsonLinesSink:
    """Writes frame records as JSON Lines to a file or to stdout.

    Each record is written as a whole line and the stream is flushed after
    every batch, so if a run stops midway the output holds only complete
    records.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._owned = self.path is not None
        if self.path is None:
            self._out: IO[str] = sys.stdout
        else:
            try:
                self._out = self.path.open("w", encoding="utf-8")
            except OSError as exc:
                raise VstreamError(f"cannot write output {self.path}: {exc.strerror}") from exc
        self.records = 0

    def write(self, results: list[FrameResult]) -> None:
        lines = "".join(json.dumps(r.to_record(), separators=(",", ":")) + "\n" for r in results)
        self._out.write(lines)
        self._out.flush()
        self.records += len(results)

    def close(self) -> None:
        if self._owned:
            self._out.close()
        else:
            self._out.flush()

    def __enter__(self) -> JsonLinesSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
