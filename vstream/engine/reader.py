"""One stream in a running pipeline: a reader thread from its source into the intake."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

import torch

from vstream.config.models import SourceConfig
from vstream.errors import VstreamError
from vstream.pipeline.intake import Intake
from vstream.sources import Source, SourceState, SourceStats, open_source
from vstream.uri import redact_uri

log = logging.getLogger("vstream.runtime")

_FPS_WINDOW_SECONDS = 5.0


class StreamReader:
    """Opens a source on its own thread and feeds its frames to the pipeline's intake.

    Opening a camera can take seconds and a live read can block, so each
    stream gets a thread: adding, losing or removing one never holds up the
    others. The reader stops between frames when asked; :meth:`stop` also
    closes the source, which sources allow from another thread, to end a
    blocking read.
    """

    def __init__(
        self, config: SourceConfig, *, pipeline: str, intake: Intake, device: torch.device
    ) -> None:
        self.config = config
        self.id = config.id
        self.pipeline = pipeline
        self._intake = intake
        self._device = device
        self._stop = threading.Event()
        self._source: Source | None = None
        self._state = SourceState.CONNECTING
        self.error: str | None = None
        self.frames_processed = 0
        self.frames_discarded = 0
        """Frames received but not processed: inference errors, refused while stopping."""
        self.frame_age_seconds: float | None = None
        self._done_at: deque[tuple[float, int]] = deque()
        intake.register(self.id, max(config.queue_size, 1))
        self._thread = threading.Thread(target=self._run, name=f"reader-{self.id}", daemon=True)

    @property
    def uri(self) -> str:
        """The source address without credentials: the only form shown anywhere."""
        return redact_uri(self.config.uri)

    @property
    def state(self) -> SourceState:
        return self._source.state if self._source is not None else self._state

    @property
    def source_stats(self) -> SourceStats:
        return self._source.stats if self._source is not None else SourceStats()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self._source = open_source(
                self.config.uri,
                stream_id=self.id,
                device=self._device,
                options=self.config.to_options(),
            )
        except Exception as exc:
            self._fail("cannot open", exc)
            return
        if self._stop.is_set():
            self._source.close()
            return
        log.info("stream %s: reading %s", self.id, self.uri)
        try:
            for frame in self._source:
                if not self._intake.put(self.id, frame, self._stop):
                    self.frames_discarded += 1
                    break
        except Exception as exc:
            self._fail("stopped reading", exc)
        finally:
            self._source.close()
        if self.error is None and not self._stop.is_set():
            log.info("stream %s: finished (%d frames)", self.id, self.source_stats.frames_decoded)

    def _fail(self, what: str, exc: Exception) -> None:
        self._state = SourceState.FAILED
        detail = str(exc) if isinstance(exc, VstreamError) else f"{type(exc).__name__}: {exc}"
        self.error = redact_uri(detail)
        log.error("stream %s: %s: %s", self.id, what, self.error)

    def stop(self) -> None:
        """Ask the reader to stop taking frames; returns at once."""
        self._stop.set()
        self._intake.wake()
        if self._source is not None:
            self._source.close()

    def join(self, timeout: float) -> bool:
        """Wait for the reader thread to end; True if it did."""
        if self._thread.ident is not None:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def count_processed(self, captured_at: float, now: float) -> None:
        """Called by the inference loop for each of this stream's frames it finished."""
        self.frames_processed += 1
        self.frame_age_seconds = max(0.0, now - captured_at)
        self._done_at.append((time.monotonic(), self.frames_processed))
        while (
            len(self._done_at) > 2 and self._done_at[1][0] < time.monotonic() - _FPS_WINDOW_SECONDS
        ):
            self._done_at.popleft()

    def fps(self) -> float:
        """Frames processed per second over the last few seconds."""
        now = time.monotonic()
        if len(self._done_at) < 2 or now - self._done_at[-1][0] > _FPS_WINDOW_SECONDS:
            return 0.0
        (t0, n0), (t1, n1) = self._done_at[0], self._done_at[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def describe(self) -> dict[str, Any]:
        """What the API shows about this stream (no credentials)."""
        stats = self.source_stats
        return {
            "id": self.id,
            "pipeline": self.pipeline,
            "uri": self.uri,
            "state": self.state.value,
            "error": self.error,
            "frames_decoded": stats.frames_decoded,
            "frames_processed": self.frames_processed,
            "frames_dropped": stats.frames_dropped + self.frames_discarded,
            "reconnects": stats.reconnects,
            "fps": round(self.fps(), 2),
            "frame_age_seconds": (
                round(self.frame_age_seconds, 4) if self.frame_age_seconds is not None else None
            ),
        }
