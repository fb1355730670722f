"""Keypoints and oriented boxes on lines and zones, and carried through predicted frames.

A pose model's keypoints can stand for an object instead of its box's anchor
(``analytics.anchor_keypoints``: a person counted by the midpoint of the
ankles). Where they are not seen (a passer-by hides the feet) the box's anchor
alone would stand in, a foot or so from them: a person standing by a line
would cross it and back. :class:`KeypointOffsets` keeps, per track, where the
keypoints were from the box's anchor when last seen, and places the object
there from its anchor while they are not. On frames the detector skips
(cadence) the tracker predicts only boxes: :class:`ShapeMemory` keeps each
confirmed track's last detected keypoints and oriented box, and moves them
with the predicted box (its centre's shift, its width's and height's scale),
so predicted records carry them too, marked predicted with their boxes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np

from vstream.postprocess.tasks import VISIBLE
from vstream.results import KEYPOINTS, OBB


def keypoint_indices(wanted: Sequence[str] | None, names: Sequence[str]) -> tuple[int, ...]:
    """The positions of the ``wanted`` keypoints (names, or numbers) among a model's ``names``;
    raises ValueError naming what is missing."""
    if not wanted:
        return ()
    if not names:
        raise ValueError(
            f"analytics.anchor_keypoints {list(wanted)} needs a pose model; this one has no "
            "keypoints"
        )
    found = []
    for name in wanted:
        if name in names:
            found.append(names.index(name))
        elif name.isdigit() and int(name) < len(names):
            found.append(int(name))
        else:
            raise ValueError(
                f"analytics.anchor_keypoints: the model has no keypoint {name!r}; its keypoints "
                f"are {', '.join(names)} (or their numbers 0 to {len(names) - 1})"
            )
    return tuple(found)


def keypoint_points(
    fallback: np.ndarray, keypoints: np.ndarray, indices: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """``(N, 2)`` points: the mean of each object's keypoints at ``indices`` that are visible
    (score at least :data:`VISIBLE`; every one where the model gives no score), else
    ``fallback`` (the box's anchor); and ``(N,)`` bool, whether any was visible."""
    chosen = np.asarray(keypoints, dtype=np.float64)[:, list(indices), :]
    if chosen.shape[-1] > 2:
        visible = chosen[..., 2] >= VISIBLE
    else:
        visible = np.ones(chosen.shape[:2], dtype=bool)
    count = visible.sum(axis=1)
    total = (chosen[..., :2] * visible[..., None]).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / count[:, None]
    seen = count > 0
    return np.where(seen[:, None], mean, np.asarray(fallback, dtype=np.float64)), seen


class KeypointOffsets:
    """Per track, where the keypoints that stand for it were from its box's anchor when last
    seen (module doc)."""

    def __init__(self) -> None:
        self._offsets: dict[int, tuple[float, float]] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def hold(
        self, track_ids: np.ndarray, anchors: np.ndarray, points: np.ndarray, seen: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Remember the offsets of the tracks whose keypoints are ``seen`` (their ``points``
        from their box's ``anchors``); return the rows of the others that have one, and
        their anchors moved by it: where their keypoints stand now."""
        rows, moved = [], []
        for row, (track, (ax, ay), (px, py), visible) in enumerate(
            zip(track_ids.tolist(), anchors.tolist(), points.tolist(), seen.tolist(), strict=True)
        ):
            if visible:
                self._offsets[track] = (px - ax, py - ay)
            elif (offset := self._offsets.get(track)) is not None:
                rows.append(row)
                moved.append((ax + offset[0], ay + offset[1]))
        return np.array(rows, dtype=np.intp), np.array(moved, dtype=np.float64).reshape(-1, 2)

    def forget(self, live: Collection[int]) -> None:
        """Drop the tracks not in ``live`` (the tracker's live ids)."""
        for track in [t for t in self._offsets if t not in live]:
            del self._offsets[track]


class ShapeMemory:
    """Each confirmed track's last detected keypoints and oriented box, for predicted frames."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[np.ndarray, dict[str, np.ndarray]]] = {}
        """Track id -> its box and its keypoints and obb rows at its last detection."""

    def __len__(self) -> int:
        return len(self._last)

    def remember(
        self,
        track_ids: np.ndarray,
        boxes: np.ndarray,
        data: Mapping[str, np.ndarray],
        live: Callable[[], Collection[int]],
    ) -> None:
        """Keep the shapes of a detected frame's confirmed tracks; forget tracks not in
        ``live()`` (the tracker's live ids, asked only where there are shapes to keep or
        forget: most models have none)."""
        columns = {k: v for k, v in data.items() if k in (KEYPOINTS, OBB)}
        if not columns and not self._last:
            return
        for row, track in enumerate(np.asarray(track_ids).tolist()):
            if track > 0:
                shape = {k: v[row].copy() for k, v in columns.items()}
                self._last[track] = (np.array(boxes[row], dtype=np.float64), shape)
        kept = live()
        for track in [t for t in self._last if t not in kept]:
            del self._last[track]

    def carry(self, track_ids: np.ndarray, boxes: np.ndarray) -> dict[str, np.ndarray]:
        """The ``keypoints`` and ``obb`` columns for predicted ``boxes`` of ``track_ids``: each
        track's last ones, moved and scaled as its box was since (empty: nothing kept)."""
        if not self._last or not len(track_ids):
            return {}
        kept = [self._last.get(t) for t in np.asarray(track_ids).tolist()]
        sample = next((k[1] for k in kept if k is not None), None)
        if sample is None:
            return {}
        columns: dict[str, np.ndarray] = {}
        for name, value in sample.items():
            rows = []
            for box, entry in zip(np.asarray(boxes, dtype=np.float64), kept, strict=True):
                if entry is None:  # a track detected before the model's shapes were kept
                    rows.append(np.zeros_like(value))
                    continue
                then, shape = entry
                scale = (box[2:4] - box[0:2]) / np.maximum(then[2:4] - then[0:2], 1e-6)
                centre, centre_then = (box[0:2] + box[2:4]) / 2, (then[0:2] + then[2:4]) / 2
                moved = shape[name].astype(np.float64).copy()
                if name == KEYPOINTS:
                    moved[:, 0:2] = centre + (moved[:, 0:2] - centre_then) * scale
                else:  # cx, cy, w, h, angle
                    moved[0:2] = centre + (moved[0:2] - centre_then) * scale
                    moved[2:4] = moved[2:4] * scale
                rows.append(moved.astype(value.dtype))
            columns[name] = np.stack(rows)
        return columns
