"""The tracker interface the analytics use, and the box IoU every tracker needs.

The interface is columnar, like the detections it consumes: one call per frame
with ``(N, 4)`` boxes, ``(N,)`` scores and class ids, returning ``(N,)`` track
ids. Anything that implements it (another algorithm, a wrapper around a
library) can be given to :class:`vstream.analytics.StreamAnalytics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Prediction:
    """The boxes a tracker predicts for a frame it was given no detections for."""

    boxes: np.ndarray
    """``(N, 4)`` float ``x1, y1, x2, y2`` pixels."""
    track_ids: np.ndarray
    """``(N,)`` int64, positive: confirmed tracks only."""
    class_ids: np.ndarray
    """``(N,)`` int64: the class each track reports (:meth:`Tracker.track_classes`)."""
    scores: np.ndarray
    """``(N,)`` float: the score of each track's last detection."""


@runtime_checkable
class Tracker(Protocol):
    """Per-stream multi-object tracker: feed every frame, in presentation order."""

    def update(
        self,
        boxes: np.ndarray,
        scores: np.ndarray,
        class_ids: np.ndarray,
        pts_seconds: float,
        embeddings: np.ndarray | None = None,
    ) -> np.ndarray:
        """Associate one frame's detections with tracks.

        ``boxes`` are ``(N, 4)`` float ``x1, y1, x2, y2`` in pixels. Returns
        ``(N,)`` int64 track ids: positive for a detection on a confirmed track,
        :data:`~vstream.results.NO_TRACK` otherwise. Ids are never reused.

        ``embeddings``: ``(N, D)`` float32 unit rows, one per detection, from an
        appearance model (a row of zeros: no vector for that detection); a
        tracker that uses no appearance ignores them. None: no vectors this frame.
        """
        ...

    def predict(self, pts_seconds: float, *, still: bool = False) -> Prediction:
        """The confirmed tracks' boxes at ``pts_seconds``, for a frame not detected.

        Advances the tracks' state as :meth:`update` would before associating;
        ``still``: the picture has not changed, so the tracks stop moving.
        """
        ...

    def track_classes(self, track_ids: np.ndarray) -> np.ndarray:
        """The class each confirmed track reports (its majority), ``-1`` for unknown ids."""
        ...

    def live_track_ids(self) -> frozenset[int]:
        """Ids of the confirmed tracks still kept (seen now, or lost but not yet forgotten)."""
        ...

    def reset(self) -> None:
        """Forget every track (a new scene); ids keep increasing."""
        ...


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of ``(N, 4)`` and ``(M, 4)`` ``x1, y1, x2, y2`` boxes: ``(N, M)``."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    # Width and height of every overlap at once: (N, M, 2).
    overlap = np.minimum(a[:, None, 2:], b[None, :, 2:])
    overlap -= np.maximum(a[:, None, :2], b[None, :, :2])
    return _ratio(overlap, area(a)[:, None], area(b)[None, :])


def iou_pairs(
    a: np.ndarray, b: np.ndarray, rows: np.ndarray | None = None, cols: np.ndarray | None = None
) -> np.ndarray:
    """IoU of the pairs ``(a[rows[k]], b[cols[k]])`` of ``(N, 4)`` and ``(M, 4)`` float64
    ``x1, y1, x2, y2`` boxes (no ``rows`` and ``cols``: ``a`` and ``b`` row by row): ``(P,)``,
    the same bits as those entries of :func:`iou_matrix` (the same arithmetic, element by
    element)."""
    if rows is None or cols is None:
        first, second, area_a, area_b = a, b, area(a), area(b)
    else:
        first, second, area_a, area_b = a[rows], b[cols], area(a)[rows], area(b)[cols]
    overlap = np.minimum(first[:, 2:], second[:, 2:])
    overlap -= np.maximum(first[:, :2], second[:, :2])
    return _ratio(overlap, area_a, area_b)


def area(boxes: np.ndarray) -> np.ndarray:
    """``(N,)`` areas of ``(N, 4)`` ``x1, y1, x2, y2`` boxes; inverted sides count as 0."""
    size = np.maximum(boxes[:, 2:] - boxes[:, :2], 0.0)
    return size[:, 0] * size[:, 1]


def _ratio(overlap: np.ndarray, area_a: np.ndarray, area_b: np.ndarray) -> np.ndarray:
    """Intersection over union from the overlaps' ``(..., 2)`` signed sides and the boxes'
    areas (broadcast); ``overlap`` is clamped in place. A pair of empty boxes: 0."""
    np.maximum(overlap, 0.0, out=overlap)
    intersection = overlap[..., 0] * overlap[..., 1]
    union = area_a + area_b
    union -= intersection
    return np.divide(intersection, union, out=np.zeros(intersection.shape), where=union > 0)
