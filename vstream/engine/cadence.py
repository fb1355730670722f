"""Detect only the frames that need it; the tracker predicts the others.

Every-frame detection is bounded by the model: more streams per machine come
from detecting less often. A stream's :class:`Cadence` decides, frame by
frame and in the stream's order, whether the detector sees a frame:

- ``detect_every: n``: frames whose index is ``n`` kept frames or more past
  the last detected one (so a frame dropped by a live stream's ``latest``
  policy does not push the next detection back; with a file's ``stride``,
  ``n`` counts the frames kept, whose indices step by the stride);
- ``detect_fps: f``: the first frame at or after each tick of a ``1/f``
  second grid of stream time (pts), so the rate holds at any frame rate;
- ``motion``: of the frames the rate allows, only those whose picture
  changed since the last detection (:mod:`vstream.preprocess.motion`), or
  any once ``max_idle_seconds`` have passed without one.

With ``adapt_detect_every: m``, a live stream that falls behind (its
``latest`` policy dropping frames in the intake) detects less often before
it drops more: each time new drops are seen, at most every
:data:`ADAPT_STEP_SECONDS` of stream time, ``detect_every`` goes up by one,
to at most ``m``; after :data:`CALM_SECONDS` without a new drop it comes
back down by one. Frames predicted only because of it are counted
(``frames_adapted``).

The first frame, and the first after the pts goes back (a loop, a restarted
camera: the tracker forgets its tracks there), are always detected.

The decision is made by the preprocessing stage as it gathers a batch
(:mod:`vstream.engine.stages`), after the intake's drops, so a batch's model
slots hold only frames to detect; the others ride along in the batch, in
order, and cost their decode plus :func:`predicted_result`: the tracker's
Kalman prediction of its confirmed tracks, run through the lines and zones
like detected boxes. A crossing is counted once, on the frame where it
happens, whichever kind that frame is.
"""

from __future__ import annotations

import enum
import math
import threading

import numpy as np

from vstream.analytics.events import AttributesOf
from vstream.analytics.stream import StreamAnalytics
from vstream.config.cadence import CadenceOptions
from vstream.engine.outputs import Read, recorded
from vstream.errors import SourceError
from vstream.frame import Frame
from vstream.results import PREDICTED, Detections, FrameResult

ADAPT_STEP_SECONDS = 0.5
"""Least stream time between two steps down of the detection rate under load."""
CALM_SECONDS = 2.0
"""Stream time without a new drop after which the detection rate steps back up."""

COUNTED = ("frames_detected", "frames_predicted", "frames_motion_skipped", "frames_adapted")
"""What :meth:`Cadence.counts` counts (a cluster adds them up over a stream's workers)."""

_PTS_TOLERANCE = 1e-4
"""Seconds a frame may come early on the ``detect_fps`` grid (pts are rounded by containers)."""


class Decision(enum.Enum):
    """What a stream's cadence does with a frame."""

    DETECT = "detect"
    PREDICT = "predict"
    """Not due: the tracker predicts its boxes."""
    STILL = "still"
    """Due, but the picture has not changed since the last detection: the tracks stay put."""

    def __bool__(self) -> bool:
        return self is Decision.DETECT


class Cadence:
    """One stream's detection schedule and its counts (see the module docstring)."""

    def __init__(self, options: CadenceOptions, stride: int = 1) -> None:
        from vstream.preprocess.motion import MotionGate

        self.options = options
        self.stride = stride
        """The source's index step between frames it keeps (a file's ``stride``)."""
        self.gate = MotionGate(options.motion) if options.motion is not None else None
        self._lock = threading.Lock()
        self.frames_detected = 0
        """Frames sent to the detector."""
        self.frames_predicted = 0
        """Frames whose boxes the tracker predicted instead (motion-skipped ones included)."""
        self.frames_motion_skipped = 0
        """Predicted frames the rate would have detected, kept off the model by the motion gate."""
        self.frames_adapted = 0
        """Predicted frames ``detect_every`` would have detected, kept off the model under load
        (``adapt_detect_every``)."""
        self.every = options.detect_every
        """``detect_every`` in force: the option's, or higher while a live stream is behind."""
        self._drops_seen = 0
        self._changed_at: float | None = None
        """The pts at which :attr:`every` last changed, or a new drop was last seen."""
        self._last_index: int | None = None
        self._last_pts: float | None = None
        """The pts of the last frame detected."""
        self._seen_pts: float | None = None
        """The pts of the last frame decided on: one before it starts a new scene."""
        self._next_tick: float | None = None

    def check_rate(self, source_fps: float | None) -> None:
        """Refuse a ``detect_fps`` above the rate the stream declares (it could never be met)."""
        rate = self.options.detect_fps
        if rate is not None and source_fps is not None and rate > source_fps + 1e-6:
            raise SourceError(
                f"detect_fps {rate:g} is above the stream's frame rate ({source_fps:g} fps); "
                f"give at most {source_fps:g}, or detect_every"
            )

    def decide(self, frame: Frame, dropped: int = 0) -> Decision:
        """Whether ``frame`` goes to the detector, and if not whether for a still picture;
        frames must come in the stream's order. ``dropped``: the stream's frames dropped by
        its freshness policy so far (what ``adapt_detect_every`` reacts to)."""
        pts = frame.pts_seconds
        restart = self._seen_pts is None or pts < self._seen_pts
        self._seen_pts = pts
        if self.options.adapt_detect_every is not None and not restart:
            self._adapt(dropped, pts)
        detect = restart or self._due(frame)
        adapted = (
            not detect
            and self.every > self.options.detect_every
            and self._last_index is not None
            and frame.index - self._last_index >= self.options.detect_every * self.stride
        )
        skipped_still = False
        if detect and not restart and self.gate is not None:
            assert self._last_pts is not None
            idle = pts - self._last_pts >= self.gate.config.max_idle_seconds
            if not self.gate.still(frame) or idle:
                self.gate.remember()
            else:
                detect, skipped_still = False, True
        elif detect and self.gate is not None:
            self.gate.changed_fraction(frame)
            self.gate.remember()
        with self._lock:
            if detect:
                self.frames_detected += 1
            else:
                self.frames_predicted += 1
                self.frames_motion_skipped += skipped_still
                self.frames_adapted += adapted
        if detect:
            self._last_index, self._last_pts = frame.index, pts
            if self.options.detect_fps is not None:
                tick = pts if restart or self._next_tick is None else self._next_tick
                self._next_tick = next_tick(tick, pts, 1.0 / self.options.detect_fps)
        return Decision.DETECT if detect else Decision.STILL if skipped_still else Decision.PREDICT

    def _due(self, frame: Frame) -> bool:
        """Whether the rate (``detect_every`` or ``detect_fps``) asks for a detection."""
        if self.options.detect_fps is not None:
            assert self._next_tick is not None
            return frame.pts_seconds >= self._next_tick - _PTS_TOLERANCE
        assert self._last_index is not None
        return frame.index - self._last_index >= self.every * self.stride

    def _adapt(self, dropped: int, pts: float) -> None:
        """Step ``every`` up on new drops (at most each ADAPT_STEP_SECONDS), down when calm."""
        limit = self.options.adapt_detect_every
        assert limit is not None
        since = None if self._changed_at is None else pts - self._changed_at
        if dropped > self._drops_seen:
            self._drops_seen = dropped
            if self.every < limit and (since is None or since >= ADAPT_STEP_SECONDS):
                self.every += 1
            self._changed_at = pts
        elif self.every > self.options.detect_every and since is not None and since >= CALM_SECONDS:
            self.every -= 1
            self._changed_at = pts

    def counts(self) -> dict[str, int]:
        """Frames detected, predicted and motion-skipped so far (:data:`COUNTED`)."""
        with self._lock:
            return {name: getattr(self, name) for name in COUNTED}

    @property
    def detection_rate(self) -> float | None:
        """The fraction of frames detected so far; None before the first frame."""
        return detection_rate(self.counts())

    def state(self) -> dict[str, int | float | None]:
        """The counts and the detection rate, as the stream status and metrics show them."""
        return cadence_figures(self.counts(), self.every)


def detection_rate(counts: dict[str, int]) -> float | None:
    """The fraction of ``counts``' frames detected; None before the first frame."""
    total = counts["frames_detected"] + counts["frames_predicted"]
    return counts["frames_detected"] / total if total else None


def cadence_figures(counts: dict[str, int], every: int | None) -> dict[str, int | float | None]:
    """``counts`` (:data:`COUNTED`), the detection rate and the ``detect_every`` in use, as
    the stream status and metrics show them."""
    rate = detection_rate(counts)
    return {
        **counts,
        "detection_rate": round(rate, 4) if rate is not None else None,
        "detect_every_now": every,
    }


def next_tick(tick: float, pts: float, interval: float) -> float:
    """The first tick after ``pts`` of the grid through ``tick``, one every ``interval`` s.

    Computed, not stepped to: a stream's pts may jump by any amount (1e12 s
    in a crafted file), and a step loop would hold the pipeline's shared
    preprocessing thread for as many steps. Where ``pts`` is so large that
    ``interval`` is below its float precision, the tick stays at ``pts``:
    every frame is then due, which is wrong only for such a stream, and bounded.
    """
    limit = pts + _PTS_TOLERANCE
    following = tick + max(1, math.floor((limit - tick) / interval) + 1) * interval
    if following <= limit:  # the product rounded down onto the limit: one step more
        following += interval
    return following


def undetected_result(frame: Frame) -> FrameResult:
    """The record of a frame the detector did not see, before the tracker fills it in."""
    return FrameResult(
        frame.stream_id,
        frame.index,
        frame.pts_seconds,
        frame.width,
        frame.height,
        Detections.empty(),
    )


def predicted_result(
    analytics: StreamAnalytics,
    result: FrameResult,
    *,
    still: bool = False,
    read: Read | None = None,
    attributes_of: AttributesOf | None = None,
) -> FrameResult:
    """``result`` (of a frame not detected) with the tracker's predicted boxes, events and counts.

    The boxes are marked ``predicted`` and carry their tracks' last keypoints and oriented
    boxes, moved with them (:class:`~vstream.analytics.shapes.ShapeMemory`); like detected
    ones, only those whose track's last score is above the records' ``conf`` are kept, and
    go through the cascade's ``read`` (which carries cached readings only). ``still``: the
    motion gate found the picture unchanged, so the tracks stay where they were.
    """
    size = (result.width, result.height)
    prediction = analytics.predict(result.pts_seconds, size, still=still)
    boxes = Detections(
        prediction.boxes,
        prediction.scores,
        prediction.class_ids,
        prediction.track_ids,
        class_names=analytics.class_names,
        data={
            PREDICTED: np.ones(len(prediction.scores), dtype=bool),
            **analytics.shapes.carry(prediction.track_ids, prediction.boxes),
        },
    )
    return recorded(analytics, result, boxes, read=read, attributes_of=attributes_of)
