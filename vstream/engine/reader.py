"""One stream in a running pipeline: a reader thread from its source into the intake.

Every entry point reads streams through this one class: ``vstream run``
(flags or a file), ``vstream serve``, the HTTP API and the Python API. It
opens the source on its own thread (opening a camera can take seconds, and a
live read can block), so adding, losing or removing one stream never holds
up the others, and it keeps the stream's counters. A source that fails
(anything but a transient fault, which the source itself retries) ends the
stream once, with state ``failed`` and one line saying why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from vstream.config.sources import FreshnessPolicy, SourceConfig
from vstream.engine.cadence import Cadence
from vstream.engine.intake import Intake
from vstream.engine.status import StreamStatus
from vstream.errors import describe
from vstream.frame import Frame
from vstream.sources.base import ResumePoint, SourceState, SourceStats
from vstream.uri import is_live, redact

if TYPE_CHECKING:
    from vstream.analytics.stream import StreamAnalytics
    from vstream.cascade.counts import StreamAttributeCounts

log = logging.getLogger("vstream.engine")

FPS_WINDOW_SECONDS = 5.0

_CONNECTING = (SourceState.CONNECTING, SourceState.RECONNECTING)
"""States in which a stopped reader hands out no more frames, however long it takes to end."""

_SETTLE_STEP_SECONDS = 0.1


class StreamCounters:
    """What happened to a stream's frames after its source, safe to update from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        """Held to count; notified at each count, for :meth:`wait_until`."""
        self.frames_processed = 0
        self.frames_failed = 0
        """Frames whose preprocessing, inference or postprocessing failed."""
        self.frames_discarded = 0
        """Frames queued when the stream was removed or the pipeline stopped, or in flight
        in stages that failed or were given up on at shutdown; and ``frames_at_stop``."""
        self.frames_at_stop = 0
        """Of ``frames_discarded``: the frame a reader had decoded and was waiting to queue
        when the stop came (at most one per stop). The run ended before it, as a run ends
        before the frames it never decoded: the summary does not call it dropped."""
        self.detections = 0
        self.frame_age_seconds: float | None = None
        self._done_at: deque[tuple[float, int]] = deque()

    def processed(self, frames: int, detections: int, age_seconds: float | None) -> None:
        now = time.monotonic()
        with self._lock:
            self.frames_processed += frames
            self.detections += detections
            if age_seconds is not None:
                self.frame_age_seconds = age_seconds
            self._done_at.append((now, self.frames_processed))
            while len(self._done_at) > 2 and self._done_at[1][0] < now - FPS_WINDOW_SECONDS:
                self._done_at.popleft()
            self._lock.notify_all()

    def failed(self, frames: int) -> None:
        with self._lock:
            self.frames_failed += frames
            self._lock.notify_all()

    def discarded(self, frames: int, *, at_stop: bool = False) -> None:
        with self._lock:
            self.frames_discarded += frames
            self.frames_at_stop += frames if at_stop else 0
            self._lock.notify_all()

    def wait_until(self, settled: Callable[[], bool], timeout: float) -> bool:
        """Wait up to ``timeout`` s for ``settled()`` to hold, asked again at each count."""
        with self._lock:
            return self._lock.wait_for(settled, timeout)

    def fps(self) -> float:
        """Frames processed per second over the last few seconds."""
        now = time.monotonic()
        with self._lock:
            if len(self._done_at) < 2 or now - self._done_at[-1][0] > FPS_WINDOW_SECONDS:
                return 0.0
            (t0, n0), (t1, n1) = self._done_at[0], self._done_at[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0


class StreamReader:
    """Reads one source on its own thread into the pipeline's intake, in order.

    The source is either described (``config``: opened on the reader thread
    with :func:`vstream.sources.open_source`) or given (``frames``: any
    iterable of frames, e.g. an open source from the Python API). :meth:`stop`
    asks the thread to end at the next frame and closes the source, which
    sources allow from another thread, to end a blocking read.
    """

    def __init__(
        self,
        stream_id: str,
        *,
        intake: Intake,
        device: Any,
        config: SourceConfig | None = None,
        frames: Iterable[Frame] | None = None,
        pipeline: str = "",
        cuda_stream: Any = None,
        on_end: Any = None,
        packet_tap: Any = None,
        resume: ResumePoint | None = None,
    ) -> None:
        if (config is None) == (frames is None):
            raise ValueError("give a source config or an iterable of frames, not both")
        self.id = stream_id
        self.config = config
        self.pipeline = pipeline
        self.counters = StreamCounters()
        self.error: BaseException | None = None
        """What ended the stream, if it failed."""
        self._frames = frames
        self._intake = intake
        self._device = device
        self._cuda_stream = cuda_stream
        self._on_end = on_end
        self._packet_tap = packet_tap
        self._resume = resume
        self.analytics: StreamAnalytics | None = None
        """The stream's tracker, lines and zones, when the pipeline has them or the stream's
        cadence needs a tracker."""
        self.cadence = (
            Cadence(config, config.stride) if config is not None and config.cadence_on else None
        )
        """Which frames the detector sees (:mod:`vstream.engine.cadence`); None: every frame."""
        self.attributes: StreamAttributeCounts | None = None
        """The cascade's readings of the stream's objects, counted (the pipeline sets it when
        it has secondary models)."""
        self._stop = threading.Event()
        self._stopped_in: SourceState | None = None
        """The state :meth:`stop` found it in (closing the source changes it)."""
        self._source: Any = frames
        self._state = SourceState.CONNECTING
        live = config is not None and is_live(config.uri)
        policy = (config.policy if config is not None else None) or (
            FreshnessPolicy.LATEST if live else FreshnessPolicy.BLOCK
        )
        self.policy = policy
        self.lane = intake.register(
            stream_id, config.queue_size if config is not None else 2, policy
        )
        self._thread = threading.Thread(target=self._run, name=f"reader-{stream_id}", daemon=True)

    @property
    def uri(self) -> str | None:
        """The source address without credentials: the only form shown anywhere."""
        return redact(self.config.uri) if self.config is not None else None

    @property
    def state(self) -> SourceState:
        if self.error is not None:
            return SourceState.FAILED
        source_state = getattr(self._source, "state", None)
        return source_state if isinstance(source_state, SourceState) else self._state

    @property
    def source_stats(self) -> SourceStats:
        stats = getattr(self._source, "stats", None)
        return stats if isinstance(stats, SourceStats) else SourceStats()

    @property
    def source_fps(self) -> float | None:
        """The frame rate the source declares (files), else None."""
        fps = getattr(self._source, "fps", None)
        return float(fps) if isinstance(fps, int | float) and fps > 0 else None

    @property
    def expected_frames(self) -> int | None:
        """Frames the source's container declares, when it is a file that says."""
        count = getattr(self._source, "frame_count", None)
        return count if isinstance(count, int) else None

    @property
    def frames_dropped(self) -> int:
        """Frames the freshness policy dropped, plus those discarded at removal."""
        return self.lane.dropped + self.counters.frames_discarded

    @property
    def frames_in_flight(self) -> int:
        """Frames the source gave that are not counted yet: queued, or in the pipeline's stages.

        0 for frames given as an iterable (no source counts them)."""
        counted = self.counters.frames_processed + self.counters.frames_failed + self.frames_dropped
        return max(0, self.source_stats.frames_delivered - counted)

    def leave_intake(self) -> None:
        """Take the stream out of the intake: its queued frames discarded, counted (the
        policy's drops stay on its lane; a stream added again under its id has a new one)."""
        self.counters.discarded(self._intake.unregister(self.lane))

    def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the thread to end, or to wait for a connection (no
        frame comes from there once stopped), and for its frames to be counted.

        Call after :meth:`stop`. Frames already in the stages are processed (or
        fail) on their way: the counters are final once they are through. A
        connection being opened cannot be cut short (FFmpeg's open returns at its
        timeout): the thread may live on, holding nothing.
        """
        deadline = time.monotonic() + timeout
        while self.running and self._stopped_in not in _CONNECTING:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.join(min(_SETTLE_STEP_SECONDS, left))
        return self.counters.wait_until(
            lambda: self.frames_in_flight == 0, max(0.0, deadline - time.monotonic())
        )

    @property
    def frames_failed(self) -> int:
        return self.counters.frames_failed

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        with self._on_cuda_stream():
            try:
                if self.config is not None:
                    from vstream.sources import open_source

                    self._source = open_source(
                        self.config.uri,
                        stream_id=self.id,
                        device=self._device,
                        options=self.config.options(),
                        packet_tap=self._packet_tap,
                        resume=self._resume,
                    )
                    if self._stop.is_set():
                        return
                    if self.cadence is not None:
                        self.cadence.check_rate(self.source_fps)
                    log.info("stream %s: reading %s", self.id, self.uri)
                self._read()
            except Exception as exc:
                self.fail(exc)
            finally:
                self._close_source()
                self._state = SourceState.FINISHED
                if self._on_end is not None:
                    self._on_end(self)

    def _on_cuda_stream(self) -> Any:
        import contextlib

        if self._cuda_stream is None:
            return contextlib.nullcontext()
        import torch

        return torch.cuda.stream(self._cuda_stream)

    def _read(self) -> None:
        self._state = SourceState.STREAMING
        gate = self.cadence.gate if self.cadence is not None else None
        for frame in self._source:
            if gate is not None:  # its motion masks rasterised here, not on the shared thread
                gate.prepare(frame.width, frame.height)
            if not self._intake.put(self.lane, frame, self._stop):
                self.counters.discarded(1, at_stop=True)  # decoded when the stop came
                return
        if self.config is not None and not self._stop.is_set():
            log.info("stream %s: finished (%d frames)", self.id, self.source_stats.frames_decoded)

    def fail(self, exc: BaseException) -> None:
        """End the stream for good: state ``failed``, one line in the log, the reader stops."""
        if self.error is not None:
            return
        self.error = exc
        log.error("stream %s: failed: %s", self.id, redact(describe(exc)))
        self.stop()

    @property
    def error_text(self) -> str | None:
        return redact(describe(self.error)) if self.error is not None else None

    def _close_source(self) -> None:
        close = getattr(self._source, "close", None)
        if close is not None:
            close()

    def stop(self) -> None:
        """Ask the reader to stop taking frames; returns at once."""
        if not self._stop.is_set():
            self._stopped_in = self.state
        self._stop.set()
        self._intake.wake()
        if hasattr(self._source, "state"):  # sources may be closed from any thread;
            self._close_source()  # a plain generator may not (its own thread closes it)

    def join(self, timeout: float) -> bool:
        """Wait for the reader thread to end; True if it did."""
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def frames_decoded(self) -> int:
        return self.source_stats.frames_decoded

    @property
    def frames_skipped(self) -> int:
        return self.source_stats.frames_skipped

    @property
    def reconnects(self) -> int:
        return self.source_stats.reconnects

    @property
    def corrupt_packets(self) -> int:
        return self.source_stats.corrupt_packets

    @property
    def packets_skipped(self) -> int:
        return self.source_stats.packets_skipped

    @property
    def frame_age_seconds(self) -> float | None:
        return self.counters.frame_age_seconds

    def status(self) -> StreamStatus:
        """What the API shows about this stream (no credentials)."""
        return StreamStatus.of(self)
