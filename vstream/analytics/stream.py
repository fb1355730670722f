"""Per-stream analytics: one tracker, its lines and zones, fed one frame at a time.

A :class:`StreamAnalytics` belongs to exactly one stream and holds all of that
stream's state, so streams batched together never share tracks or counts.
Frames must come in presentation order; a pts that goes backwards starts a
new scene (the tracker forgets its tracks; counts are kept).

State is bounded: the lines and zones keep something only for tracks the
tracker still holds, and drop it in the frame the tracker forgets the track.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from vstream.analytics.events import AttributesOf, Direction, Event
from vstream.analytics.lines import LineCounter
from vstream.analytics.placing import Placement, moved, place
from vstream.analytics.shapes import KeypointOffsets, ShapeMemory, keypoint_indices
from vstream.analytics.zones import ZoneMonitor
from vstream.config.analytics import AnalyticsConfig
from vstream.config.tracking import DEFAULT_CONF
from vstream.masks import Mask, TrackMasks
from vstream.tracking import ByteTracker, Tracker
from vstream.tracking.base import Prediction

log = logging.getLogger("vstream.analytics")


@dataclass(frozen=True)
class AnalyticsUpdate:
    """What one frame brought: track ids per detection, events, and the running state."""

    track_ids: np.ndarray
    """``(N,)`` int64, one per detection: its confirmed track's id, or -1."""
    events: list[Event] = field(default_factory=list)
    line_counts: dict[str, dict[Direction, int]] = field(default_factory=dict)
    """Crossings so far per line and direction: ``{"gate": {"in": 3, "out": 1}}``."""
    zone_occupancy: dict[str, int] = field(default_factory=dict)
    """Tracks inside each zone after this frame."""


class StreamAnalytics:
    """Tracking, line counting and zones for one stream."""

    def __init__(
        self,
        config: AnalyticsConfig,
        class_names: Sequence[str] | Mapping[int, str] = (),
        tracker: Tracker | None = None,
        conf: float = DEFAULT_CONF,
        keypoint_names: Sequence[str] = (),
        stream: str = "",
    ) -> None:
        """``conf`` is the pipeline's ``postprocess.conf``: the tracker's unset thresholds
        follow it, and records keep only detections above it (the detector may hand over
        lower ones for the tracker, :meth:`AnalyticsConfig.candidate_conf`).
        ``keypoint_names``: a pose model's, which ``anchor_keypoints`` name (ValueError
        where one is not among them). ``stream`` names the stream in the warnings about
        lines and zones outside its frames."""
        self.config = config
        self.stream = stream
        self._placed_on: tuple[int, int] | None = None
        """The frame size the lines and zones were last checked against."""
        self.anchor_keypoints = keypoint_indices(config.anchor_keypoints, keypoint_names)
        """Positions of the keypoints that stand for an object on lines and zones (none: the
        box's anchor)."""
        self.keypoint_offsets = KeypointOffsets()
        """Where each track's keypoints were from its box's anchor when last seen: where it
        stands while they are not."""
        self.shapes = ShapeMemory()
        """Each track's last keypoints and oriented box, carried through predicted frames."""
        self.conf = conf
        self.tracker: Tracker = tracker or ByteTracker(config.effective_tracking, conf=conf)
        if config.enabled and tracker is None:
            ByteTracker.load_matcher()
        names = class_names if isinstance(class_names, Mapping) else dict(enumerate(class_names))
        self._names: dict[int, str] = {int(k): str(v) for k, v in names.items()}
        band, wait = config.dead_band_pixels, config.min_seconds_on_side
        self.lines = [LineCounter(line, band, wait) for line in config.lines]
        self.zones = [ZoneMonitor(zone, band, wait) for zone in config.zones]
        self.masks = TrackMasks()
        """Each track's last mask, which predicted frames carry (a segmentation model's)."""

    def label(self, class_id: int) -> str:
        """The class name of ``class_id`` (its number when the model gave no name)."""
        return self._names.get(class_id, str(class_id))

    @property
    def class_names(self) -> Mapping[int, str]:
        """The model's class names by id (a class without one is labelled with its number)."""
        return self._names

    @property
    def num_track_states(self) -> int:
        """Per-track entries held by the lines and zones (what their memory grows with)."""
        return sum(line.num_track_states for line in self.lines) + sum(
            zone.num_track_states for zone in self.zones
        )

    def update(
        self,
        boxes: np.ndarray,
        scores: np.ndarray,
        class_ids: np.ndarray,
        pts_seconds: float,
        frame_size: tuple[int, int] | None = None,
        *,
        embeddings: np.ndarray | None = None,
        attributes_of: AttributesOf | None = None,
    ) -> AnalyticsUpdate:
        """Track one frame's detections and run them through the lines and zones:
        :meth:`track`, then :meth:`observe`.

        ``boxes`` are ``(N, 4)`` ``x1, y1, x2, y2`` pixels. ``frame_size``
        (``width, height``), when given, lets lines near the frame edge narrow
        their dead band on the outer side, and zones along it count objects the
        frame cuts off (:mod:`~vstream.analytics.zones`).
        """
        track_ids = self.track(boxes, scores, class_ids, pts_seconds, embeddings=embeddings)
        return self.observe(track_ids, boxes, pts_seconds, frame_size, attributes_of=attributes_of)

    def track(
        self,
        boxes: np.ndarray,
        scores: np.ndarray,
        class_ids: np.ndarray,
        pts_seconds: float,
        *,
        embeddings: np.ndarray | None = None,
    ) -> np.ndarray:
        """The tracker's step alone: ``(N,)`` int64 track ids, positive where confirmed.

        ``embeddings`` (``(N, D)`` unit rows, an appearance model's) join the
        association cost when the tracker was built with appearance. Separate from
        :meth:`observe` so that a cascade can read the tracked objects between the
        two, and lines and zones can count by what it read.
        """
        if embeddings is None:
            return self.tracker.update(boxes, scores, class_ids, pts_seconds)
        return self.tracker.update(boxes, scores, class_ids, pts_seconds, embeddings=embeddings)

    def predict(
        self, pts_seconds: float, frame_size: tuple[int, int] | None = None, *, still: bool = False
    ) -> Prediction:
        """A frame the detector did not see: the tracker's predicted boxes (cadence).

        Boxes are clipped to ``frame_size``; one wholly outside it is left out.
        ``still``: the picture has not changed since the last detection
        (:meth:`Tracker.predict`). The boxes then go through :meth:`observe`
        with ``predicted``: a line keeps one state per track whichever kind of
        frame moved it, so a crossing is counted once, time stamped where the
        object passed, detected or predicted; a detection settles it.
        """
        prediction = self.tracker.predict(pts_seconds, still=still)
        if frame_size is not None and len(prediction.boxes):
            width, height = frame_size
            boxes = prediction.boxes.copy()
            boxes[:, 0::2] = boxes[:, 0::2].clip(0, width)
            boxes[:, 1::2] = boxes[:, 1::2].clip(0, height)
            inside = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
            prediction = Prediction(
                boxes[inside],
                prediction.track_ids[inside],
                prediction.class_ids[inside],
                prediction.scores[inside],
            )
        return prediction

    def observe(
        self,
        track_ids: np.ndarray,
        boxes: np.ndarray,
        pts_seconds: float,
        frame_size: tuple[int, int] | None = None,
        *,
        attributes_of: AttributesOf | None = None,
        keypoints: np.ndarray | None = None,
        masks: Sequence[Mask | None] | None = None,
        placement: Placement | None = None,
        predicted: bool = False,
    ) -> AnalyticsUpdate:
        """Run a frame's tracked boxes through the lines and zones.

        ``track_ids`` (``(N,)``, from :meth:`track` or a prediction) and ``boxes``
        (``(N, 4)``) are one frame's; only confirmed tracks (positive ids) are
        placed. ``attributes_of`` gives a track's secondary readings (a cascade),
        for the lines' and zones' ``attributes`` filters and their events. ``keypoints``
        (``(N, K, D)``, a pose model's) place the objects where ``anchor_keypoints`` says;
        ``masks`` (one per box, or None) are what zones counting by mask place objects by.
        ``placement``: these boxes placed already, with other streams' frames
        (:func:`~vstream.analytics.placing.place`). ``predicted``: the boxes are the
        tracker's (:meth:`predict`), which move the lines' and zones' tracks but settle
        no crossing, entry or exit (:mod:`~vstream.analytics.lines`).
        """
        if frame_size is not None and frame_size != self._placed_on:
            self._placed_on = frame_size
            self._warn_outside(*frame_size)
        track_ids = np.asarray(track_ids, dtype=np.int64)
        events: list[Event] = []
        if self.lines or self.zones:
            if placement is None:
                (placement,) = place(self, [(track_ids, boxes, keypoints)])
            elif len(placement.confirmed) != len(track_ids):
                raise ValueError(
                    f"a placement of {len(placement.confirmed)} boxes for {len(track_ids)}"
                )
            if placement.seen is not None:
                rows, held = self.keypoint_offsets.hold(
                    placement.ids, placement.anchors, placement.points, placement.seen
                )
                if len(rows):
                    placement = moved(self, placement, rows, held)
            ids, points = placement.ids, placement.points
            placed = (
                [m for m, c in zip(masks, placement.confirmed.tolist(), strict=True) if c]
                if masks
                else None
            )
            pts = float(pts_seconds)
            classes = self.tracker.track_classes(ids)
            for line, distances in zip(self.lines, placement.distances, strict=True):
                if frame_size is not None:
                    line.set_frame_size(*frame_size)
                events.extend(
                    line.observe(
                        ids,
                        points,
                        distances,
                        classes,
                        pts,
                        self.label,
                        attributes_of,
                        predicted=predicted,
                    )
                )
            for zone, inside, clear in zip(
                self.zones, placement.inside, placement.clear, strict=True
            ):
                if frame_size is not None:
                    zone.set_frame_size(*frame_size)
                    inside, clear = zone.in_frame(points, inside, clear)
                events.extend(
                    zone.observe(
                        ids,
                        inside,
                        clear,
                        classes,
                        pts,
                        self.label,
                        attributes_of,
                        placed,
                        predicted=predicted,
                    )
                )
            live = self.tracker.live_track_ids()
            self.keypoint_offsets.forget(live)
            for line in self.lines:
                events.extend(line.forget(live, self.label))
            for zone in self.zones:
                events.extend(zone.forget(live, self.label))
        return AnalyticsUpdate(
            track_ids=track_ids,
            events=events,
            line_counts={line.config.name: line.counts() for line in self.lines},
            zone_occupancy={zone.config.name: zone.occupancy for zone in self.zones},
        )

    def _warn_outside(self, width: int, height: int) -> None:
        """Say once per frame size which lines and zones lie (partly) outside the frame.

        Coordinates are the picture's pixels, so a line drawn for another size
        counts nothing, silently, unless said here: the first frame is the first
        moment its size is known.
        """
        places = [
            ("line", line.config.name, line.segment.share_in_frame(width, height))
            for line in self.lines
        ] + [
            ("zone", zone.config.name, zone.polygon.share_in_frame(width, height))
            for zone in self.zones
        ]
        stream = f"stream {self.stream}: " if self.stream else ""
        for kind, name, share in places:
            if share <= 0.0:
                log.warning(
                    "%s%s %s lies outside the %dx%d frame: it will count nothing",
                    stream, kind, name, width, height,
                )  # fmt: skip
            elif share < 0.999:
                log.warning(
                    "%s%s %s lies %.0f %% outside the %dx%d frame: only the part inside counts",
                    stream, kind, name, 100 * (1 - share), width, height,
                )  # fmt: skip

    def line_totals(self) -> dict[str, dict[Direction, dict[str, int]]]:
        """Crossings so far per line, direction and class label (for metrics and the API)."""
        totals: dict[str, dict[Direction, dict[str, int]]] = {}
        for line in self.lines:
            per_direction: dict[Direction, dict[str, int]] = {"in": {}, "out": {}}
            for (direction, class_id), n in sorted(line.totals.items()):
                label = self.label(class_id)
                per_direction[direction][label] = per_direction[direction].get(label, 0) + n
            totals[line.config.name] = per_direction
        return totals

    def zone_totals(self) -> dict[str, dict[str, int]]:
        """Per zone: objects inside now and entries so far."""
        return {z.config.name: {"occupancy": z.occupancy, "entries": z.entries} for z in self.zones}

    def reset(self) -> None:
        """Forget every track (a new scene). Counts so far are kept; objects inside zones exit
        in the next update's events."""
        self.tracker.reset()
