"""Appearance for association: how unlike a track's look a detection is, blended into the IoU cost.

IoU alone cannot tell two objects apart where their boxes overlap (a
crossing, one passing behind another): the track goes to whichever box fits
best, and the ids swap. An embedding model (a secondary model of kind
``embedding``, :mod:`vstream.cascade`) gives each detection an L2-normalised
vector; each track keeps a smoothed vector of its own (:class:`AppearanceBank`),
and the association cost becomes::

    cost = (1 - weight) * (1 - IoU) + weight * (1 - cos(track, detection)) / 2

Both terms are in ``[0, 1]``. The IoU gate is kept as it is: a pair the IoU
refuses (an infinite cost) stays refused, so in this cost appearance only
reorders the pairs motion already allows. Where a track or a detection has
no vector (not read yet, not selected by the model's ``on``), the pair's
cost is the IoU term alone.

:class:`~vstream.tracking.ByteTracker` does two more things with looks (see
its module): it refuses pairs that look unlike, and it re-identifies a track
its IoU gate lost (an object that stopped or turned back while hidden) by
look alone, only near the path between where the track was last seen and
where it is predicted, never across the frame.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def cosine_distance(tracks: np.ndarray, detections: np.ndarray) -> np.ndarray:
    """``(T, N)`` cosine distance of unit rows, scaled to ``[0, 1]``: ``(1 - a . b) / 2``.

    Rows of zeros (no vector) give NaN, so :func:`blend_costs` can leave them out.
    """
    tracks = np.asarray(tracks, dtype=np.float32)
    detections = np.asarray(detections, dtype=np.float32)
    if len(tracks) == 0 or len(detections) == 0:
        return np.full((len(tracks), len(detections)), np.nan, dtype=np.float32)
    tracks = tracks.reshape(len(tracks), -1)
    detections = detections.reshape(len(detections), -1)
    distance = (1.0 - np.clip(tracks @ detections.T, -1.0, 1.0)) / 2.0
    # any(axis=1) of a 2-D array is an array; numpy's stubs allow a bare bool too.
    missing = ~tracks.any(axis=1)[:, None] | ~detections.any(axis=1)[None, :]  # type: ignore[index]
    return np.where(missing, np.nan, distance)


def blend_costs(iou_cost: np.ndarray, appearance: np.ndarray, weight: float) -> np.ndarray:
    """``(1 - weight) * iou_cost + weight * appearance`` where both are known.

    ``iou_cost`` is the tracker's ``1 - IoU`` with infinite entries for pairs its
    gate refuses; they stay infinite. A NaN ``appearance`` (no vector) leaves the
    pair at its IoU cost.
    """
    keep_iou = np.isnan(appearance) | ~np.isfinite(iou_cost)
    # Filled where the IoU cost is kept, so that inf * 0 (weight 1) makes no NaN.
    blended = (1.0 - weight) * np.where(keep_iou, 0.0, iou_cost) + weight * np.where(
        keep_iou, 0.0, appearance
    )
    return np.where(keep_iou, iou_cost, blended)


class AppearanceBank:
    """Each track's appearance: a moving average of its detections' vectors, kept unit length.

    ``momentum`` is the share of the old vector kept at each update (0.9: the
    last ten or so readings count); a smoothed vector is steadier than the last
    one through partial occlusion and blur. Memory is bounded by the live
    tracks (:meth:`retain`).
    """

    def __init__(self, momentum: float = 0.9) -> None:
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        self.momentum = momentum
        self._vectors: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._vectors)

    def update(self, track_ids: np.ndarray, embeddings: np.ndarray) -> None:
        """Fold each fresh vector into its track's (rows of ``track_ids`` below 1 are skipped)."""
        for track, vector in zip(np.asarray(track_ids).tolist(), embeddings, strict=True):
            if track < 1 or not vector.any():
                continue
            kept = self._vectors.get(track)
            mixed = vector if kept is None else self.momentum * kept + (1 - self.momentum) * vector
            norm = float(np.linalg.norm(mixed))
            if norm > 0:
                self._vectors[track] = (mixed / norm).astype(np.float32)

    def vectors(self, track_ids: np.ndarray, dimension: int) -> np.ndarray:
        """``(T, dimension)``: each track's vector, zeros for a track without one."""
        out = np.zeros((len(track_ids), dimension), dtype=np.float32)
        for row, track in enumerate(np.asarray(track_ids).tolist()):
            vector = self._vectors.get(track)
            if vector is not None:
                out[row] = vector
        return out

    def retain(self, live_track_ids: Iterable[int]) -> None:
        """Forget the vectors of tracks not in ``live_track_ids``."""
        live = set(live_track_ids)
        for track in [t for t in self._vectors if t not in live]:
            del self._vectors[track]


__all__ = ["AppearanceBank", "blend_costs", "cosine_distance"]
