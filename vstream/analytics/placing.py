"""Where a frame's confirmed tracks stand against its stream's lines and zones.

Placing is the geometry a line or a zone needs before it steps its tracks: each
confirmed track's anchor point (or keypoints), its signed distance from every
line, whether it is inside every zone and clear of its border. For a handful of
objects that costs numpy calls, not arithmetic, and the streams of one pipeline
share their lines and zones; so :func:`place` takes several streams' frames,
stacks their boxes, asks every line and zone once, and hands each frame its own
rows (:class:`Placement`), exactly what it would get alone: the arithmetic is
row by row, the same operations on the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
    points = anchor_points(boxes[confirmed], analytics.config.anchor)
    if keyed[0]:
        keypoints = _stacked([np.asarray(f[2]) for f in frames])
        points = keypoint_points(points, keypoints[confirmed], analytics.anchor_keypoints)
    columns = [line.place(points) for line in analytics.lines]
    for zone in analytics.zones:
        columns.extend(zone.place(points))
    if len(frames) == 1:
        split = [[column] for column in (confirmed, ids[confirmed], points, *columns)]
    else:
        # Each frame's rows: its boxes' among the stacked boxes, its confirmed ones' among
        # those; one np.split a column, not a slice a column a frame.
        ends = list(accumulate(len(i) for i in each_ids))[:-1]
        kept_ends = np.concatenate(([0], np.cumsum(confirmed)))[ends]
        split = [np.split(confirmed, ends)] + [
            np.split(column, kept_ends) for column in (ids[confirmed], points, *columns)
        ]
    # A frame's row: confirmed, ids, points, each line's distances, each zone's inside and clear.
    zones = 3 + len(analytics.lines)
    return [
        Placement(row[0], row[1], row[2], row[3:zones], row[zones::2], row[zones + 1 :: 2])
        for row in zip(*split, strict=True)
    ]


def _stacked(arrays: list[np.ndarray]) -> np.ndarray:
    """``arrays`` one after another (the one itself, where there is one)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
