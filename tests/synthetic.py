"""Synthetic detections for the tracking, line and zone tests: objects on scripted paths.

An object follows straight segments between waypoints ``(t, x, y)`` (the
point is its box's bottom centre) and is detected in every frame between its
first and last waypoint, except while hidden. Rendering the same scene at two
frame rates samples the same motion, which is what the fps tests compare.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from vstream.analytics import AnalyticsUpdate, StreamAnalytics


@dataclass
class Mover:
    waypoints: list[tuple[float, float, float]]
    """``(seconds, x, y)`` of the box's bottom centre, in time order."""
    size: tuple[float, float] = (40.0, 60.0)
    class_id: int = 0
    score: float = 0.9
    hidden: list[tuple[float, float]] = field(default_factory=list)
    """Intervals ``[start, end)`` in seconds with no detection (occlusion, misses)."""
    jitter: float = 0.0
    """Standard deviation of Gaussian noise on the box corners, pixels."""

    def point(self, t: float) -> tuple[float, float] | None:
        times = [w[0] for w in self.waypoints]
        if t < times[0] - 1e-9 or t > times[-1] + 1e-9:
            return None
        if any(start <= t < end for start, end in self.hidden):
            return None
        x = float(np.interp(t, times, [w[1] for w in self.waypoints]))
        y = float(np.interp(t, times, [w[2] for w in self.waypoints]))
        return x, y


@dataclass
class Frame:
    pts: float
    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray


def render(
    movers: Iterable[Mover],
    fps: float,
    seconds: float,
    frame_size: tuple[int, int] | None = None,
    seed: int = 0,
) -> list[Frame]:
    """Detections of every frame; with ``frame_size`` boxes are clipped to the frame."""
    movers = list(movers)
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(round(seconds * fps) + 1):
        t = i / fps
        boxes, scores, classes = [], [], []
        for mover in movers:
            point = mover.point(t)
            if point is None:
                continue
            x, y = point
            w, h = mover.size
            box = np.array([x - w / 2, y - h, x + w / 2, y]) + rng.normal(0, mover.jitter, 4)
            if frame_size is not None:
                box = np.clip(box, 0, [frame_size[0], frame_size[1]] * 2)
                if box[2] - box[0] < 2 or box[3] - box[1] < 2:
                    continue
            boxes.append(box)
            scores.append(mover.score)
            classes.append(mover.class_id)
        frames.append(
            Frame(
                t,
                np.array(boxes, dtype=np.float64).reshape(-1, 4),
                np.array(scores, dtype=np.float64),
                np.array(classes, dtype=np.int64),
            )
        )
    return frames


def run(
    analytics: StreamAnalytics,
    frames: Iterable[Frame],
    frame_size: tuple[int, int] | None = None,
) -> list[AnalyticsUpdate]:
    return [
        analytics.update(f.boxes, f.scores, f.class_ids, f.pts, frame_size=frame_size)
        for f in frames
    ]


def events(updates: Iterable[AnalyticsUpdate], kind: str | None = None) -> list[dict]:
    """Every event's record, in order, optionally of one type."""
    return [e.to_record() for u in updates for e in u.events if kind is None or e.type == kind]
