"""Where a frame's confirmed tracks stand against its stream's lines and zones.

Placing is the geometry a line or a zone needs before it steps its tracks: each
confirmed track's anchor point (or keypoints), its signed distance from every
line, whether it is inside every zone and clear of its border. For a handful of
objects that costs numpy calls, not arithmetic, and the streams of one pipeline
share their lines and zones; so :func:`place` takes several streams' frames,
stacks their boxes, asks every line and zone once, and hands each frame its own
rows (:class:`Placement`), exactly what it would get alone: the arithmetic is
row by row, the same operations on the same numbers. What a stream remembers of
its own tracks, where their keypoints were from their boxes when last seen
(:class:`~vstream.analytics.shapes.KeypointOffsets`), then moves its rows whose
keypoints are not seen (:func:`moved`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Protocol

import numpy as np

from vstream.analytics.geometry import anchor_points
from vstream.analytics.lines import LineCounter
from vstream.analytics.shapes import keypoint_points
from vstream.analytics.zones import ZoneMonitor
from vstream.config.analytics import AnalyticsConfig

Tracked = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]
"""One frame to place: ``(N,)`` track ids (positive where confirmed), ``(N, 4)`` ``x1, y1,
x2, y2`` boxes, and ``(N, K, D)`` keypoints (a pose model's) or None."""


class Places(Protocol):
    """What placing reads of a stream's analytics
    (:class:`~vstream.analytics.stream.StreamAnalytics`, which places its frames here)."""

    config: AnalyticsConfig
    anchor_keypoints: tuple[int, ...]
    lines: list[LineCounter]
    zones: list[ZoneMonitor]


@dataclass(frozen=True, slots=True)
class Placement:
    """One frame's confirmed tracks placed against its stream's lines and zones."""

    confirmed: np.ndarray
    """``(N,)`` bool over the frame's boxes: the confirmed tracks, the only ones placed."""
    ids: np.ndarray
    """``(M,)`` int64: their track ids."""
    points: np.ndarray
    """``(M, 2)``: the point that stands for each on lines and zones."""
    distances: tuple[np.ndarray, ...]
    """Per line, ``(M,)`` pixels from it, positive on its ``in`` side."""
    inside: tuple[np.ndarray, ...]
    """Per zone, ``(M,)`` bool: the point is inside."""
    clear: tuple[np.ndarray, ...]
    """Per zone, ``(M,)`` bool: the point is farther than the dead band from its border."""
    anchors: np.ndarray
    """``(M, 2)``: each box's anchor (``points`` itself where no keypoints stand for them)."""
    seen: np.ndarray | None
    """``(M,)`` bool where keypoints stand for the objects: whether they were seen (the point
    is theirs, not the box's anchor); None where they do not."""


def place(analytics: Places, frames: Sequence[Tracked]) -> list[Placement]:
    """The :class:`Placement` of each of ``frames``: streams' frames that all share
    ``analytics``' lines, zones, anchor and anchor keypoints (one pipeline's streams).

    Keypoints stand for objects where ``analytics.anchor_keypoints`` names some and a frame
    has them; frames that differ in that are placed one at a time.
    """
    if not frames:
        return []
    keyed = [bool(analytics.anchor_keypoints) and f[2] is not None for f in frames]
    layouts = {np.shape(f[2])[1:] for f, k in zip(frames, keyed, strict=True) if k}
    if len(frames) > 1 and (len(set(keyed)) > 1 or len(layouts) > 1):
        return [place(analytics, [frame])[0] for frame in frames]
    each_ids = [np.asarray(f[0], dtype=np.int64).reshape(-1) for f in frames]
    each_boxes = [np.asarray(f[1], dtype=np.float64).reshape(-1, 4) for f in frames]
    for ids, boxes in zip(each_ids, each_boxes, strict=True):
        if len(ids) != len(boxes):
            raise ValueError(f"{len(ids)} track ids for {len(boxes)} boxes")
    ids, boxes = _stacked(each_ids), _stacked(each_boxes)
    confirmed = ids > 0
    anchors = points = anchor_points(boxes[confirmed], analytics.config.anchor)
    seen = None
    if keyed[0]:
        keypoints = _stacked([np.asarray(f[2]) for f in frames])
        points, seen = keypoint_points(anchors, keypoints[confirmed], analytics.anchor_keypoints)
    elif analytics.anchor_keypoints:  # frames without keypoints: none seen
        seen = np.zeros(len(points), dtype=bool)
    # A frame's row: confirmed, ids, points, where keypoints stand for objects the anchors
    # and whether they were seen, each line's distances, each zone's inside and clear.
    keyed_columns = [anchors, seen] if seen is not None else []
    columns = [ids[confirmed], points, *keyed_columns]
    columns.extend(line.place(points) for line in analytics.lines)
    for zone in analytics.zones:
        columns.extend(zone.place(points))
    if len(frames) == 1:
        split = [[column] for column in (confirmed, *columns)]
    else:
        # Each frame's rows: its boxes' among the stacked boxes, its confirmed ones' among
        # those; one np.split a column, not a slice a column a frame.
        ends = list(accumulate(len(i) for i in each_ids))[:-1]
        kept_ends = np.concatenate(([0], np.cumsum(confirmed)))[ends]
        split = [np.split(confirmed, ends)] + [np.split(column, kept_ends) for column in columns]
    lines = 3 + len(keyed_columns)
    zones = lines + len(analytics.lines)
    return [
        Placement(
            row[0],
            row[1],
            row[2],
            row[lines:zones],
            row[zones::2],
            row[zones + 1 :: 2],
            anchors=row[3] if keyed_columns else row[2],
            seen=row[4] if keyed_columns else None,
        )
        for row in zip(*split, strict=True)
    ]


def moved(
    analytics: Places, placement: Placement, rows: np.ndarray, points: np.ndarray
) -> Placement:
    """``placement`` with the points at ``rows`` (of its confirmed tracks) moved to ``(R, 2)``
    ``points``, and placed there (one stream's: its keypoints' offsets,
    :class:`~vstream.analytics.shapes.KeypointOffsets`)."""
    moved_points = placement.points.copy()
    moved_points[rows] = points
    distances = []
    for line, column in zip(analytics.lines, placement.distances, strict=True):
        distances.append(column.copy())
        distances[-1][rows] = line.place(points)
    inside, clear = [], []
    for zone, is_inside, is_clear in zip(
        analytics.zones, placement.inside, placement.clear, strict=True
    ):
        inside.append(is_inside.copy())
        clear.append(is_clear.copy())
        inside[-1][rows], clear[-1][rows] = zone.place(points)
    return replace(
        placement,
        points=moved_points,
        distances=tuple(distances),
        inside=tuple(inside),
        clear=tuple(clear),
    )


def _stacked(arrays: list[np.ndarray]) -> np.ndarray:
    """``arrays`` one after another (the one itself, where there is one)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
