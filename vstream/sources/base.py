"""What every source provides: frames in order, a state, and counters."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from vstream.frame import Frame


class SourceState(str, enum.Enum):
    """Life cycle of a source, as shown in logs, the API and metrics."""

    CONNECTING = "connecting"
    STREAMING = "streaming"
    RECONNECTING = "reconnecting"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass
class SourceStats:
    """Counters of one source since it was opened.

    Every decoded picture is delivered or skipped: ``frames_decoded ==
    frames_delivered + frames_skipped`` whenever the source is between frames.
    """

    frames_decoded: int = 0
    frames_delivered: int = 0
    """Frames handed to the consumer."""
    frames_skipped: int = 0
    """Frames decoded but not selected: before ``start_seconds`` (decoding starts at the key
    frame before it), from ``end_seconds`` on, between ``stride`` picks, or delivered
    already before a resume."""
    frames_dropped: int = 0
    """Frames discarded by the freshness policy (live sources only)."""
    reconnects: int = 0
    """Reconnection attempts (live sources), successful or not."""
    corrupt_packets: int = 0
    """Damaged packets: flagged by the demuxer (still decoded, FFmpeg concealing the damage,
    so such a packet may have given a frame too) or refused by the decoder (skipped)."""
    packets_skipped: int = 0
    """Live sources: packets read and not decoded (each a frame lost, never counted in
    ``frames_decoded``): before a connection's first key frame, or the stream having fallen
    ``max_behind_seconds`` behind its camera."""
    last_gap_seconds: float | None = None
    """Live sources: time without frames around the latest reconnection."""
    behind_seconds: float = 0.0
    """Live sources: how far behind the camera's pace the latest frame was read
    (:mod:`vstream.decoders.backlog`); a stream that keeps up stays near 0."""


@dataclass(frozen=True)
class ResumePoint:
    """Where a stream picks up again on another worker: after the last frame delivered.

    A cluster driver knows which records reached its sinks; when the worker
    reading a stream is lost, the stream is opened again elsewhere and starts
    after this frame, with indices (and, for files, time stamps) continuing
    those of the original stream. ``wall_time`` (``time.time()``) is when that
    frame's record was delivered: live streams continue their time stamps by
    the wall clock from there, so the gap shows.
    """

    index: int
    pts_seconds: float
    wall_time: float


class PacketTap(Protocol):
    """Receives every compressed packet of a source's video stream (event clips keep them).

    ``offset`` is set by the source to the seconds it adds to the stream's own
    time stamps (loops, reconnections), so packet and frame times agree.
    """

    offset: float

    def add(self, packet: Any) -> None: ...


@runtime_checkable
class Source(Protocol):
    """A stream of :class:`Frame` objects from one file, camera or URL."""

    stream_id: str

    @property
    def state(self) -> SourceState: ...

    @property
    def stats(self) -> SourceStats: ...

    def __iter__(self) -> Iterator[Frame]: ...

    def close(self) -> None: ...
