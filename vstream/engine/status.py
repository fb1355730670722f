"""What an engine shows of one stream, built once for a reader here or a stream on a worker.

A leaf of the engine: the readers (:mod:`vstream.engine.reader`), the
cluster's streams (:mod:`vstream.cluster.stream`) and the engines' interface
(:mod:`vstream.engine.interface`) all use it, and it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

from vstream.config.sources import SourceConfig
from vstream.metrics import StreamSample
from vstream.sources.base import SourceState

if TYPE_CHECKING:
    from vstream.analytics.stream import StreamAnalytics


class Counts(Protocol):
    """A stream's counters of delivered records (:class:`vstream.engine.reader.StreamCounters`)."""

    frames_processed: int
    detections: int
    frames_at_stop: int

    def fps(self) -> float: ...


class StreamView(Protocol):
    """One stream as an engine keeps it: a reader in this process, or a stream on a worker."""

    id: str
    pipeline: str
    config: SourceConfig | None
    error: BaseException | None
    counters: Counts
    """Frames processed (delivered), detections, rate."""
    analytics: StreamAnalytics | None

    @property
    def uri(self) -> str | None:
        """The source's address with credentials masked."""
        ...

    @property
    def expected_frames(self) -> int | None: ...

    @property
    def state(self) -> SourceState: ...

    @property
    def error_text(self) -> str | None: ...

    @property
    def frames_dropped(self) -> int: ...

    @property
    def frames_failed(self) -> int: ...

    @property
    def frames_decoded(self) -> int: ...

    @property
    def frames_skipped(self) -> int: ...

    @property
    def reconnects(self) -> int: ...

    @property
    def corrupt_packets(self) -> int: ...

    @property
    def packets_skipped(self) -> int:
        """Live packets never decoded: before a connection's first key frame, or the stream
        had fallen too far behind its camera."""
        ...

    @property
    def frame_age_seconds(self) -> float | None: ...

    def status(self) -> StreamStatus:
        """What the API shows of it: :meth:`StreamStatus.of` it."""
        ...


@dataclass(frozen=True)
class StreamStatus:
    """What the API shows of one stream, the same from either engine; never credentials.

    ``frames_decoded`` = processed + failed + dropped + skipped once the
    stream has stopped. ``placement`` is the cluster's part (worker, moves,
    gap_seconds), empty in one process.
    """

    id: str
    pipeline: str
    uri: str | None
    state: str
    error: str | None
    frames_decoded: int
    frames_processed: int
    frames_failed: int
    frames_dropped: int
    frames_skipped: int
    detections: int
    reconnects: int
    corrupt_packets: int
    packets_skipped: int
    fps: float
    frame_age_seconds: float | None
    analytics: dict[str, Any] = field(default_factory=dict)
    """Line counts and zone occupancy, where analytics run."""
    cadence: dict[str, Any] = field(default_factory=dict)
    """Frames detected, predicted and skipped for no motion, and the detection rate, where the
    stream's cadence skips frames (:mod:`vstream.engine.cadence`)."""
    attributes: dict[str, Any] = field(default_factory=dict)
    """Per secondary model: objects read fresh, readings carried (cached), model runs, seconds
    in the model and fresh readings per label, where the pipeline has a cascade."""
    placement: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, stream: StreamView, **placement: Any) -> StreamStatus:
        age = stream.frame_age_seconds
        return cls(
            id=stream.id,
            pipeline=stream.pipeline,
            uri=stream.uri,
            state=stream.state.value,
            error=stream.error_text,
            frames_decoded=stream.frames_decoded,
            frames_processed=stream.counters.frames_processed,
            frames_failed=stream.frames_failed,
            frames_dropped=stream.frames_dropped,
            frames_skipped=stream.frames_skipped,
            detections=stream.counters.detections,
            reconnects=stream.reconnects,
            corrupt_packets=stream.corrupt_packets,
            packets_skipped=stream.packets_skipped,
            fps=round(stream.counters.fps(), 2),
            frame_age_seconds=round(age, 4) if age is not None else None,
            analytics=analytics_state(stream.analytics),
            cadence=cadence_state(stream),
            attributes=attributes_state(stream),
            placement=placement,
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``GET /streams/{id}``: the fields, then the keys of analytics
        (``lines``, ``zones``), cadence and placement, each once, at the top level;
        ``attributes`` only where the pipeline has secondary models."""
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        if not shown["attributes"]:
            del shown["attributes"]
        for section in ("analytics", "cadence", "placement"):
            shown.update(shown.pop(section))
        return shown


@dataclass(frozen=True)
class StreamSummary:
    """What happened to one stream, for the summary lines and the exit status."""

    id: str
    pipeline: str
    state: str
    frames: int
    detections: int
    dropped: int
    failed_frames: int
    error: str | None
    packets_skipped: int = 0
    """Live packets skipped undecoded: before a connection's first key frame, or to catch up
    with the camera."""
    cadence: dict[str, Any] = field(default_factory=dict)
    """:meth:`StreamStatus.cadence`: empty where every frame is detected."""
    attributes: dict[str, Any] = field(default_factory=dict)
    """:attr:`StreamStatus.attributes`: empty without secondary models."""

    @classmethod
    def of(cls, stream: StreamView) -> StreamSummary:
        return cls(
            id=stream.id,
            pipeline=stream.pipeline,
            state=stream.state.value,
            frames=stream.counters.frames_processed,
            detections=stream.counters.detections,
            # Not the frame in hand when a stop came (Ctrl-C): the run ended before it.
            dropped=stream.frames_dropped - stream.counters.frames_at_stop,
            failed_frames=stream.frames_failed,
            error=stream.error_text,
            packets_skipped=stream.packets_skipped,
            cadence=cadence_state(stream),
            attributes=attributes_state(stream),
        )


def stream_sample(stream: StreamView) -> StreamSample:
    """A stream's figures for the metrics, the same from either engine."""
    return StreamSample(
        pipeline=stream.pipeline,
        stream=stream.id,
        state=stream.state.value,
        frames_decoded=stream.frames_decoded,
        frames_processed=stream.counters.frames_processed,
        frames_failed=stream.frames_failed,
        frames_dropped=stream.frames_dropped,
        frames_skipped=stream.frames_skipped,
        packets_skipped=stream.packets_skipped,
        reconnects=stream.reconnects,
        fps=stream.counters.fps(),
        frame_age_seconds=stream.frame_age_seconds,
        **{
            k: v
            for k, v in cadence_state(stream).items()
            if k not in ("detection_rate", "detect_every_now")
        },
    )


def cadence_state(stream: StreamView) -> dict[str, Any]:
    """A stream's detection counts and rate (:meth:`~vstream.engine.cadence.Cadence.state`);
    empty for a stream that detects every frame (a worker's stream in a cluster has none)."""
    cadence = getattr(stream, "cadence", None)
    return cadence.state() if cadence is not None else {}


def attributes_state(stream: StreamView) -> dict[str, Any]:
    """Per secondary model, the cascade's figures for the stream
    (:class:`~vstream.cascade.counts.StreamAttributeCounts`); empty without a cascade."""
    counts = getattr(stream, "attributes", None)
    return counts.state() if counts is not None else {}


def analytics_state(analytics: StreamAnalytics | None) -> dict[str, Any]:
    """Line counts (per direction, and per class) and zone occupancy, when analytics run."""
    if analytics is None:
        return {}
    lines = {
        name: {d: sum(by_class.values()) for d, by_class in directions.items()}
        | {"by_class": directions}
        for name, directions in analytics.line_totals().items()
    }
    return {"lines": lines, "zones": analytics.zone_totals()}
