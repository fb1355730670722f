"""One stream as the driver keeps it: where it runs, what reached the sinks, where it resumes.

The driver is the one place that knows which records were delivered: each
record handed to the sinks moves the stream's :class:`ResumePoint` to its
frame. When the stream's worker is lost, the stream is opened again on
another worker after that frame, so a file gives every frame once (same
indices, same time stamps) and a live stream continues after a gap, which
is counted. With that frame it keeps the stream's state (tracker, lines,
zones, secondary readings) as it stood after it, which the worker sent with
the record, and hands it to the next worker: tracks, counts and readings
carry on across a move as if nothing happened.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from vstream.config.sources import SourceConfig
from vstream.engine import carry
from vstream.engine.cadence import COUNTED, cadence_figures
from vstream.engine.reader import StreamCounters
from vstream.engine.status import StreamStatus
from vstream.errors import VstreamError
from vstream.results import FrameResult
from vstream.sources.base import ResumePoint, SourceState
from vstream.uri import is_live, redact

if TYPE_CHECKING:
    from vstream.analytics.stream import StreamAnalytics
    from vstream.cascade.counts import ModelCounts

log = logging.getLogger("vstream.cluster")

_SUMMED = (
    "frames_decoded",
    "frames_failed",
    "frames_dropped",
    "frames_skipped",
    "reconnects",
    "corrupt_packets",
    "packets_skipped",
)
"""Counters a worker reports that add up over the workers a stream ran on."""


class _Reported:
    """Figures a worker reported, added up over the workers a stream ran on, shown as the
    stream's own (``state()``, as :func:`vstream.engine.status.cadence_state` and
    :func:`~vstream.engine.status.attributes_state` read them)."""

    def __init__(self, figures: dict[str, Any]) -> None:
        self._figures = figures

    def state(self) -> dict[str, Any]:
        return self._figures


def _model_counts(reported: dict[str, Any]) -> dict[str, ModelCounts]:
    """A worker's report's secondary-model figures (``attributes``), as counts."""
    from vstream.cascade.counts import ModelCounts  # here: the cascade's package loads torch

    return {m: ModelCounts.from_json(f) for m, f in reported.get("attributes", {}).items()}


def _summed(*parts: dict[str, ModelCounts]) -> dict[str, ModelCounts]:
    """Per model, the counts of ``parts`` added up (none changed)."""
    from vstream.cascade.counts import ModelCounts, add_to

    total: dict[str, ModelCounts] = {}
    for part in parts:
        for model, counts in part.items():
            add_to(total.setdefault(model, ModelCounts()), counts)
    return total


class RemoteStreamError(VstreamError):
    """A stream failed on its worker because of its input (a bad file, a camera out of retries)."""


class RemoteBug(Exception):
    """A stream failed on its worker because of a bug; the text is the worker's one line."""


class StreamLost(VstreamError):
    """A stream's workers were lost more often than ``cluster.max_stream_moves`` allows, or
    it stalled on every worker left."""


class ClusterStream:
    """A stream of a cluster run: its placement, its delivered records and its counters."""

    def __init__(self, pipeline: str, config: SourceConfig) -> None:
        self.id = config.id
        self.pipeline = pipeline
        self.config = config
        self.counters = StreamCounters()
        """Records delivered to the driver's sinks (frames processed), detections, rate."""
        self.analytics_state: bytes | None = None
        """Its tracker, lines, zones and readings as they stood after the last frame
        delivered (:mod:`vstream.engine.carry`); None: none, or nothing delivered yet."""
        self.slot: int | None = None
        """The worker it runs on; None while it waits for one."""
        self.nvdec = False
        """It decodes with NVDEC where it runs (counted against the worker's sessions)."""
        self.worker_id: str | None = None
        """The id its worker knows it by, naming this placement: ``cam#7``; None while waiting."""
        self.resume: ResumePoint | None = None
        """The last frame delivered: where the stream starts again after a move."""
        self.moves = 0
        self.gap_seconds = 0.0
        """Live streams: seconds of video not seen because their worker was lost."""
        self.done = False
        """Every record of the stream has been delivered (it finished or failed)."""
        self.error: BaseException | None = None
        self.removed = False
        self.stalls = 0
        """Times it was moved because its worker sent none of its records for too long."""
        self.stalled_on: list[object] = []
        """The workers it stalled on: it is not placed on any of them again (a replacement
        in the slot of one is another worker)."""
        self.idle_seconds = 0.0
        """Seconds of open pulls, while it read, that brought none of its records and saw its
        worker do nothing for it (:meth:`pulled`)."""
        self._work = (0, 0)
        """What its worker had done for it at the last pull: frames handed to the pipeline,
        and frames read towards its resume point before the first of those."""
        self._moved_at: float | None = None
        self._earlier = dict.fromkeys(_SUMMED + COUNTED, 0)
        self._earlier_models: dict[str, ModelCounts] = {}
        self._status: dict[str, Any] = {}

    @property
    def endless(self) -> bool:
        """Live or looped: a move leaves a gap rather than resuming frame by frame."""
        return is_live(self.config.uri) or self.config.loop

    @property
    def uri(self) -> str:
        return redact(self.config.uri)

    @property
    def expected_frames(self) -> int | None:
        """Unknown on the driver: the file is opened on a worker."""
        return None

    @property
    def state(self) -> SourceState:
        if self.error is not None:
            return SourceState.FAILED
        if self.done:
            return SourceState.FINISHED
        if self.slot is None:
            return SourceState.RECONNECTING if self.moves else SourceState.CONNECTING
        reported = self._status.get("state")
        if reported == SourceState.FINISHED.value:  # its last records are on their way
            return SourceState.STREAMING
        return SourceState(reported) if reported else SourceState.CONNECTING

    @property
    def frame_age_seconds(self) -> float | None:
        """Capture to record on the worker, latest frame (the hop to the driver not included)."""
        return self._status.get("frame_age_seconds")

    @property
    def cadence(self) -> _Reported | None:
        """Frames detected, predicted and skipped on its workers, where its cadence skips
        frames; None otherwise."""
        if not self.config.cadence_on:
            return None
        counts = {key: self.total(key) for key in COUNTED}
        return _Reported(cadence_figures(counts, self._status.get("detect_every_now")))

    def model_counts(self) -> dict[str, ModelCounts]:
        """Its secondary models' counts on every worker it ran on, added up."""
        return _summed(self._earlier_models, _model_counts(self._status))

    @property
    def attributes(self) -> _Reported | None:
        """Its secondary models' figures on its workers; None before any (or without)."""
        counts = self.model_counts()
        return _Reported({m: c.to_json() for m, c in counts.items()}) if counts else None

    @property
    def analytics(self) -> StreamAnalytics | None:
        """Its analytics as of the last frame delivered (line counts and zones for the API)."""
        if self.analytics_state is None:
            return None
        return carry.loads(self.analytics_state).analytics

    @property
    def error_text(self) -> str | None:
        return str(self.error) if self.error is not None else None

    def placed(self, slot: int, nvdec: bool, placement: int) -> str:
        """Placed on worker ``slot`` as the run's ``placement``-th placement of any stream.

        The worker reads it as ``<id>#<placement>``, so every record and status
        it sends names this incarnation of the stream: records of an earlier
        one (removed, then added again with the same id on the same worker,
        still in that worker's pipeline or relay) are told apart and dropped.
        """
        self.slot, self.nvdec = slot, nvdec
        self.worker_id = f"{self.id}#{placement}"
        self.idle_seconds = 0.0
        self._work = (0, 0)
        return self.worker_id

    def pulled(self, seconds: float, records: int) -> float:
        """A pull from its worker, open ``seconds``, brought ``records`` of it; how long it has
        been reading without giving one, or doing anything for it.

        Only open pulls count, so a slow sink (which holds the pulls back) never
        looks like a stuck worker; and only once its worker reports it open
        (streaming, or finished with records still owed), so that a camera
        connecting or reconnecting is left to its own timeouts. A pull during
        which its worker handed frames of it to its pipeline (or, before the
        first, read frames towards its resume point) does not count either:
        the worker is working, only slowly (a loaded machine, a stream just
        moved there seeking to where it left off). A stuck pipeline stops
        taking frames once its queues are full, and its streams stall then;
        a live stream's frames dropped at a full queue are not handed on.
        """
        opening = (None, SourceState.CONNECTING.value, SourceState.RECONNECTING.value)
        work = self._worker_work()
        working = work[0] > self._work[0] or (work[0] == 0 and work[1] > self._work[1])
        self._work = work
        if records or working or self._status.get("state") in opening:
            self.idle_seconds = 0.0
        else:
            self.idle_seconds += seconds
        return self.idle_seconds

    def _worker_work(self) -> tuple[int, int]:
        """Frames its worker handed to its pipeline (decoded, less dropped and skipped), and
        frames it skipped, by its latest report."""
        status = self._status
        skipped = int(status.get("frames_skipped", 0))
        handed = int(status.get("frames_decoded", 0)) - int(status.get("frames_dropped", 0))
        return handed - skipped, skipped

    def stalled(self, worker: object) -> None:
        """Its worker is stuck: wait for another one, never ``worker`` again."""
        self.stalls += 1
        self.stalled_on.append(worker)
        self.lost_worker()

    def lost_worker(self) -> None:
        """It left its worker (lost, or stuck): keep what it counted there, wait for another."""
        for key in _SUMMED + COUNTED:
            self._earlier[key] += int(self._status.get(key, 0))
        self._earlier_models = self.model_counts()
        self._status = {}
        self.slot, self.nvdec, self.worker_id = None, False, None
        self.moves += 1
        self._moved_at = time.time()

    def delivered(self, result: FrameResult, now: float) -> None:
        """Its record of ``result`` is going to the sinks: count it and move the resume point."""
        if self._moved_at is not None:
            if self.endless and self.resume is not None:
                self.gap_seconds += max(0.0, now - self.resume.wall_time)
            self._moved_at = None
        self.resume = ResumePoint(result.frame_index, result.pts_seconds, now)
        self.counters.processed(1, len(result.detections), None)

    def report(self, status: dict[str, Any]) -> None:
        """The worker's latest description of the stream; a failure there ends it here."""
        self._status = status
        kind = status.get("error_kind")
        if kind is not None and self.error is None:
            text = status.get("error") or "failed"
            self.error = RemoteStreamError(text) if kind == "input" else RemoteBug(text)
            log.error("stream %s: failed: %s", self.id, text)
        if status.get("done"):
            self.done = True

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
            self.done = True
            log.error("stream %s: failed: %s", self.id, error)

    @property
    def terminal(self) -> bool:
        return self.done or self.removed

    def total(self, key: str) -> int:
        """A counter summed over every worker the stream ran on."""
        return self._earlier[key] + int(self._status.get(key, 0))

    @property
    def frames_dropped(self) -> int:
        return self.total("frames_dropped")

    @property
    def frames_failed(self) -> int:
        return self.total("frames_failed")

    @property
    def frames_decoded(self) -> int:
        return self.total("frames_decoded")

    @property
    def frames_skipped(self) -> int:
        return self.total("frames_skipped")

    @property
    def reconnects(self) -> int:
        return self.total("reconnects")

    @property
    def corrupt_packets(self) -> int:
        return self.total("corrupt_packets")

    @property
    def packets_skipped(self) -> int:
        return self.total("packets_skipped")

    def status(self) -> StreamStatus:
        """What the API shows, as a single process shows it, plus where it runs."""
        return StreamStatus.of(
            self,
            worker=self.slot,
            moves=self.moves,
            stalls=self.stalls,
            gap_seconds=round(self.gap_seconds, 3),
        )


class PipelineFigures:
    """A cluster pipeline's secondary-model figures for the metrics
    (:class:`vstream.metrics.CascadeFigures`), from its streams' workers' reports.

    The figures of removed streams stay in the totals (the metrics are counters), as
    last reported before the removal (what a worker read after it, at most one status
    interval, is not counted).
    """

    def __init__(self, pipeline: str, streams: dict[str, ClusterStream], lock: Any) -> None:
        """``lock``: the driver's, which guards ``streams`` and removals."""
        self.pipeline = pipeline
        self._streams = streams
        self._lock = lock
        self._removed: dict[str, ModelCounts] = {}

    def removed(self, stream: ClusterStream) -> None:
        """``stream`` was removed (under the lock): keep its figures in the totals."""
        if stream.pipeline == self.pipeline:
            self._removed = _summed(self._removed, stream.model_counts())

    def stream_counts(self) -> dict[str, dict[str, ModelCounts]]:
        with self._lock:
            return self._stream_counts()

    def _stream_counts(self) -> dict[str, dict[str, ModelCounts]]:
        streams = [s for s in self._streams.values() if s.pipeline == self.pipeline]
        return {s.id: counts for s in streams if (counts := s.model_counts())}

    def totals(self) -> dict[str, ModelCounts]:
        with self._lock:  # a removal between two reads would take its stream from both
            return _summed(self._removed, *self._stream_counts().values())
