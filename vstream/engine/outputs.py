"""What a pipeline does with a frame after its records are made: analytics and pictures.

Two steps follow postprocessing, on the postprocessing thread:

1. :func:`analyze` runs a stream's tracker, the cascade, lines and zones on
   the host-side boxes (nothing else crosses the device boundary) and returns
   the record with track ids, attributes, events, line counts and zone occupancy.
2. :class:`FrameOutputs` gives the frame to whatever wants pictures: the
   annotated video of each stream, the live preview (only while someone
   watches) and event clips (compressed packets from the demuxer, plus an
   annotated snapshot). A frame is annotated at most once, and only when one
   of them wants it; the drawing happens on the frame's own device.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from vstream.analytics.events import AttributesOf
from vstream.analytics.placing import Placement
from vstream.analytics.stream import StreamAnalytics
from vstream.config.pipelines import PipelineConfig
from vstream.config.sinks import ClipsSinkConfig, VideoSinkConfig, fill
from vstream.frame import Frame
from vstream.results import (
    KEYPOINTS,
    MASKS,
    NO_TRACK,
    PREDICTED,
    Detections,
    FrameResult,
    label_for,
)
from vstream.uri import publish_display

if TYPE_CHECKING:
    import torch

log = logging.getLogger("vstream.engine")

DEFAULT_FPS = 25.0
"""Frame rate given to a video writer when the source does not declare one (live streams)."""


@runtime_checkable
class Preview(Protocol):
    """What a pipeline uses of the preview hub (:class:`vstream.server.preview.PreviewHub`).

    Written here because the server imports the engine: the engine names the
    hub's methods it calls, never the server (``tests/test_imports.py``).
    """

    def watched(self, stream_id: str) -> bool: ...

    def offer(self, stream_id: str, frame: Callable[[], torch.Tensor]) -> bool: ...

    def remove(self, stream_id: str) -> None: ...


Read = Callable[[FrameResult, np.ndarray], FrameResult]
"""The cascade's step (:meth:`vstream.cascade.stage.Cascade.apply`) on a frame's kept, tracked
detections, ``read(kept, rows)``: between the tracker and the lines, so that they can count
by what it read. ``rows`` are the kept detections' indices among the frame's detections (before
the cut to ``conf``): what was computed per detection before the tracker follows them."""


def analyze(
    analytics: StreamAnalytics,
    result: FrameResult,
    *,
    embeddings: np.ndarray | None = None,
    read: Read | None = None,
    attributes_of: AttributesOf | None = None,
    track_ids: np.ndarray | None = None,
    placement: Placement | None = None,
) -> FrameResult:
    """``result`` after the stream's tracker, the cascade (``read``), lines and zones.

    The detector kept boxes down to the tracker's ``low_score`` for its second
    stage (:meth:`~vstream.config.PipelineConfig.detector_postprocess`); the
    record keeps only those above ``conf``, exactly as without tracking (the
    same comparison as the detector's own threshold), and the cascade reads
    only those. ``embeddings``: the appearance model's vector of every
    detection (:meth:`Cascade.embed`); ``attributes_of``: each track's readings
    (:meth:`Cascade.attributes_of`), for the lines' and zones' filters; ``track_ids``: the
    tracker's answer for these detections where it was stepped already (with other streams,
    :func:`~vstream.tracking.update_together`); ``placement``: those tracks placed against the
    lines and zones already (:func:`~vstream.analytics.placing.place`).
    """
    detections = result.detections
    if track_ids is None:
        track_ids = analytics.track(
            detections.xyxy,
            detections.confidence,
            detections.class_id,
            result.pts_seconds,
            embeddings=embeddings,
        )
    tracked = detections.with_columns(tracker_id=np.where(track_ids > 0, track_ids, NO_TRACK))
    analytics.shapes.remember(
        tracked.tracker_id, tracked.xyxy, tracked.data, analytics.tracker.live_track_ids
    )
    return recorded(
        analytics, result, tracked, read=read, attributes_of=attributes_of, placement=placement
    )


def kept_rows(detections: Detections, conf: float) -> np.ndarray:
    """The indices of the ``detections`` a record keeps: those scoring above ``conf``."""
    # In float64, as the records always compared: against a float32 column numpy would
    # round ``conf`` to float32 first.
    return np.flatnonzero(detections.confidence.astype(np.float64) > conf)


def recorded(
    analytics: StreamAnalytics,
    result: FrameResult,
    tracked: Detections,
    *,
    read: Read | None = None,
    attributes_of: AttributesOf | None = None,
    placement: Placement | None = None,
) -> FrameResult:
    """What a frame's record holds after the analytics, detected or predicted: the
    ``tracked`` detections above ``conf``, read by the cascade (``read``), and the events
    and counts of the lines and zones, which see every confirmed track of ``tracked``
    (``placement``: placed already)."""
    tracked = analytics.masks.carry(tracked)
    rows = kept_rows(tracked, analytics.conf)
    every = len(rows) == len(tracked)  # then the same rows: shared, being read-only
    detections, kept = tracked if every else tracked[rows], result
    if read is not None:  # before the lines and zones, which may count by what it reads
        kept = read(dataclasses.replace(result, detections=detections), rows)
        detections = kept.detections
    update = analytics.observe(
        tracked.tracker_id,
        tracked.xyxy,
        result.pts_seconds,
        (result.width, result.height),
        attributes_of=attributes_of,
        keypoints=tracked.data.get(KEYPOINTS),
        masks=column.tolist() if (column := tracked.data.get(MASKS)) is not None else None,
        placement=placement,
        predicted=PREDICTED in tracked.data,
    )
    return dataclasses.replace(
        kept,
        detections=detections,
        events=tuple(event.to_record() for event in update.events),
        line_counts={k: dict(v) for k, v in update.line_counts.items()} or None,
        zone_occupancy=dict(update.zone_occupancy) or None,
    )


class FrameOutputs:
    """The annotated videos, previews and event clips of one pipeline."""

    def __init__(self, config: PipelineConfig, device: Any, class_names: dict[int, str]) -> None:
        from vstream.annotate import Annotator, LineOverlay, ZoneOverlay

        self.device = device
        self.pipeline = config.name
        self.annotator = Annotator(
            lines=[LineOverlay(x.name, x.start, x.end) for x in config.analytics.lines],
            zones=[ZoneOverlay(z.name, tuple(z.points)) for z in config.analytics.zones],
            colour_by="track" if config.analytics.enabled else "class",
            skeleton=config.model.skeleton,
        )
        self.videos = [s for s in config.sinks if isinstance(s, VideoSinkConfig)]
        self.recorders = [
            (sink, _recorder(sink, config))
            for sink in config.sinks
            if isinstance(sink, ClipsSinkConfig)
        ]
        self.preview: Preview | None = None
        """The server's preview hub, when there is one (set by the engine)."""
        self._writers: dict[tuple[int, str], Any] = {}
        self._closing: list[Any] = []
        """Writers taken out of :attr:`_writers` and being closed: still counted."""
        self._closed_counts: Counter[str] = Counter()
        """The last counters of every video closed: a stream's removal takes nothing from
        the totals, which Prometheus would read as a reset and count its frames again."""
        self._opened: set[str] = set()
        """The video files written in this run: a stream added again does not replace its
        earlier video (:meth:`_fresh`)."""
        self.finished: dict[str, Any] = {}
        """The last counters (``VideoWriterStats``) of each video closed by :meth:`close`, by its
        target as logged: what a summary says was written or published."""
        self._lock = threading.Lock()
        self._names = class_names

    @property
    def wanted(self) -> bool:
        """Whether anything here may want frames (else the pipeline skips this step)."""
        return bool(self.videos or self.recorders or self.preview is not None)

    def packet_tap(self, stream_id: str) -> Any:
        """Where the stream's demuxer puts its packets (event clips keep them), or None."""
        if not self.recorders:
            return None
        if len(self.recorders) == 1:
            return self.recorders[0][1].ring(stream_id)
        return _Fanout([recorder.ring(stream_id) for _, recorder in self.recorders])

    def deliver(self, frame: Frame, result: FrameResult, fps: float | None) -> None:
        """Hand ``frame``, annotated with ``result``, to whatever wants it."""
        stream = frame.stream_id
        picture: list[Any] = []

        def annotated() -> Any:
            if not picture:
                picture.append(self.annotator.annotate(frame, result, fps=fps))
            return picture[0]

        for index, sink in enumerate(self.videos):
            writer = self._writer(index, sink, stream, frame, fps)
            if writer is not None:
                writer.write(annotated(), frame.pts_seconds)
        if self.preview is not None and self.preview.watched(stream):
            # The hub encodes on its own thread, at its own pace: it annotates a copy then.
            self.preview.offer(stream, lambda: self.annotator.annotate(frame, result, fps=fps))
        for sink, recorder in self.recorders:
            for event in _triggers(sink, result):
                # An event's own time: a line crossing is dated where the object was first
                # seen across, some frames before the frame that confirms it.
                when = event.get("pts", result.pts_seconds)
                recorder.trigger(stream, event, when, snapshot=annotated)

    def _writer(
        self, index: int, sink: VideoSinkConfig, stream: str, frame: Frame, fps: float | None
    ) -> Any:
        """The stream's writer for ``sink``, opened at its first frame (size and rate known)."""
        key = (index, stream)
        with self._lock:
            writer = self._writers.get(key)
            if writer is not None:
                return writer
            from vstream.sinks.video.writer import VideoWriter

            target = self._target(sink, stream)
            owner = next(
                (
                    other
                    for i, other in self._writers
                    if i == index and self._target(sink, other) == target
                ),
                None,
            )
            try:
                if owner is not None:  # streams added through the API after a one-stream start
                    raise ValueError(
                        f"stream {owner} already writes it; put {{stream}} in the sink's path"
                    )
                if not sink.live:
                    target = self._fresh(target, stream)
                writer = VideoWriter(
                    target if sink.live else Path(target), frame.width, frame.height,
                    fps or DEFAULT_FPS, encoder=sink.encoder, policy=sink.policy,
                    queue_frames=sink.queue_frames, device=self.device, preset=sink.preset,
                    crf=sink.crf, min_free_bytes=sink.min_free_bytes,
                )  # fmt: skip
            except Exception as exc:  # a bad target fails this output, never the pipeline
                shown = publish_display(target) if sink.live else target
                log.error("annotated video %s: %s", shown, exc)
                writer = _NoWriter()
            self._writers[key] = writer
            return writer

    def _fresh(self, target: str, stream: str) -> str:
        """``target``, or where it was written already in this run (a stream removed and
        added again under its id), the first free ``name-2.mp4``, ``name-3.mp4``...: the
        earlier video is kept, where the new one's closing would have replaced it."""
        path, number = Path(target), 1
        while str(path) in self._opened or (number > 1 and path.exists()):
            number += 1
            path = Path(target).with_stem(f"{Path(target).stem}-{number}")
        if number > 1:
            log.warning(
                "stream %s: annotated video %s was written already in this run; this one "
                "goes to %s",
                stream, target, path,
            )  # fmt: skip
        self._opened.add(str(path))
        return str(path)

    def _target(self, sink: VideoSinkConfig, stream: str) -> str:
        """The file or URL of ``stream``'s video: the sink's path with its placeholders filled."""
        return fill(sink.path, stream=stream, pipeline=self.pipeline)

    def remove_stream(self, stream_id: str) -> None:
        """Finish the stream's videos and forget its clip ring."""
        self._close_writers(lambda stream: stream == stream_id)
        for _, recorder in self.recorders:
            recorder.remove_stream(stream_id)
        if self.preview is not None:
            self.preview.remove(stream_id)

    def close(self) -> None:
        """Finish every video (flushing its encoder) and every clip being written."""
        for writer, stats in self._close_writers(lambda stream: True):
            self.finished[writer.target] = stats
            log.info(
                "annotated video %s: %d frames written, %d dropped, %d skipped for space",
                writer.target, stats.frames_written, stats.frames_dropped, stats.frames_skipped,
            )  # fmt: skip
        for _, recorder in self.recorders:
            recorder.close()

    def _close_writers(self, chosen: Callable[[str], bool]) -> list[tuple[Any, Any]]:
        """Close the videos of the ``chosen`` streams, their counters kept in the totals
        throughout; each closed writer with its last counters (``VideoWriterStats``)."""
        with self._lock:
            writers = [w for (_, s), w in self._writers.items() if chosen(s)]
            self._writers = {k: w for k, w in self._writers.items() if not chosen(k[1])}
            self._closing.extend(writers)
        closed = []
        for writer in writers:
            stats = writer.close()
            with self._lock:
                self._closing.remove(writer)
                self._closed_counts.update(_counts(stats))
            if stats is not None:
                closed.append((writer, stats))
        return closed

    def stats(self) -> dict[str, int]:
        """Frames written and dropped by the videos (closed ones too); clips written and
        failed."""
        with self._lock:
            writers = [*self._writers.values(), *self._closing]
            counts = Counter(self._closed_counts)
        for writer in writers:
            counts.update(_counts(getattr(writer, "stats", None)))
        totals = {key: counts[key] for key in VIDEO_COUNTS}
        totals["clips"] = sum(r.stats.clips for _, r in self.recorders)
        totals["clip_failures"] = sum(r.stats.failures for _, r in self.recorders)
        return totals


CLIP_MARGIN_SECONDS = 3.0
"""What the clip rings keep beyond the pre-roll for an event's way from the demuxer through
the model to its clip (see :func:`_recorder`)."""


def _recorder(sink: ClipsSinkConfig, config: PipelineConfig) -> Any:
    """The clip recorder of ``sink``. Its rings keep, beyond the pre-roll, the time an
    event may come after its own ``pts``: a crossing is dated where the object was first
    seen across, ``min_seconds_on_side`` before it is settled, or, counted as its track is
    forgotten, ``track_buffer_seconds`` after it was last seen; a zone's exit so too. A
    ring forgetting that footage gave those clips a short pre-roll, without a word."""
    from vstream.clips.index import Retention
    from vstream.clips.recorder import ClipRecorder

    analytics = config.analytics
    late = (
        analytics.effective_tracking.track_buffer_seconds + analytics.min_seconds_on_side
        if analytics.lines or analytics.zones
        else 0.0
    )
    return ClipRecorder(
        fill(sink.directory, stream="", pipeline=config.name),  # {stream}: refused by the config
        pre_roll=sink.pre_roll_seconds,
        post_roll=sink.post_roll_seconds,
        merge=sink.merge_seconds,
        margin=CLIP_MARGIN_SECONDS + late,
        retention=Retention(max_count=sink.max_count, max_bytes=sink.max_bytes),
        min_free_bytes=sink.min_free_bytes,
    )


def _triggers(sink: ClipsSinkConfig, result: FrameResult) -> list[dict[str, Any]]:
    """The events of ``result`` that start (or extend) a clip of this sink."""
    events = [e for e in result.events or () if e.get("type") in sink.events]
    if sink.classes:
        present = set(result.detections.class_id.tolist())
        names = result.detections.class_names
        events += [
            {"type": "class_seen", "class_id": c, "label": label_for(c, names)}
            for c in sorted(present.intersection(sink.classes))
        ]
    return events


class _Fanout:
    """Several clip rings fed from one demuxer."""

    def __init__(self, rings: list[Any]) -> None:
        self.rings = rings

    @property
    def offset(self) -> float:
        return self.rings[0].offset

    @offset.setter
    def offset(self, value: float) -> None:
        for ring in self.rings:
            ring.offset = value

    def add(self, packet: Any) -> None:
        for ring in self.rings:
            ring.add(packet)


VIDEO_COUNTS = ("video_frames_written", "video_frames_dropped", "video_failures")


def _counts(stats: Any) -> dict[str, int]:
    """A video's counters (``VideoWriterStats``, None for one never opened) as totalled."""
    if stats is None:
        return {}
    return {
        "video_frames_written": stats.frames_written,
        "video_frames_dropped": stats.frames_dropped + stats.frames_skipped,
        "video_failures": stats.failures,
    }


class _NoWriter:
    """Stands in for a video that could not be opened (logged once): frames for it are dropped."""

    stats = None

    def write(self, image: Any, pts_seconds: float | None = None) -> bool:
        return False

    def close(self) -> None:
        return None
