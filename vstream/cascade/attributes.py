"""Per-track caching of secondary results: read an object again only when it may have changed.

A tracked object's colour or type does not change from frame to frame, and
reading every object of every frame multiplies a cascade's cost by the frame
rate. So a track's last reading is kept, and the object is read again only
when the reading is ``reinfer_seconds`` old (stream time), or when its box's
area has grown ``regrow`` times since (it came closer: more pixels, a better
reading). Every result says whether it was read in this frame (``fresh``) or
carried from an earlier one.

Detections on no track (tracking off, or a track not yet confirmed) are
read every time: there is nothing to carry a reading on. Memory is bounded
by the live tracks: :meth:`AttributeCache.retain` drops the readings of
tracks the tracker has forgotten, and a pts that goes backwards (a looped
file, a restarted camera) is a new scene, as for the tracker, and forgets
them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vstream.cascade.model import SecondaryOutput
from vstream.results import NO_TRACK


@dataclass(frozen=True)
class Attributes:
    """One secondary model's result for every detection of a frame, in detection order."""

    label_ids: np.ndarray
    """``(N,)`` int64: a classifier's label index; -1 for an embedding or an unread object."""
    scores: np.ndarray
    """``(N,)`` float32: the label's probability (NaN for an unread object)."""
    fresh: np.ndarray
    """``(N,)`` bool: read in this frame (True) or carried from the track's last reading."""
    read: np.ndarray
    """``(N,)`` bool: the object has a reading at all (it was selected by ``on``, and the
    model gave it numbers: :meth:`SecondaryOutput.readable`)."""
    embeddings: np.ndarray | None
    """``(N, D)`` float32 unit rows for an embedding model (zeros where unread), else None."""
    probabilities: np.ndarray | None
    """``(N, labels)`` float32 for a classifier (NaN where unread), else None."""


def labels_given(probabilities: np.ndarray, threshold: float) -> np.ndarray:
    """Which labels a multi-label classifier gives: a bool mask, every label whose
    probability is at ``threshold`` or more (the one rule for records, counts and lines)."""
    return probabilities >= threshold


def record_values(
    attributes: Attributes,
    labels: tuple[str, ...],
    *,
    multi_label: bool = False,
    threshold: float = 0.5,
    keep_embedding: bool = False,
) -> list[dict[str, Any] | None]:
    """Each detection's value under ``"attributes": {name: ...}`` in a record; None: leave out.

    A classifier gives ``{"label", "score", "fresh"}`` (with ``multi_label``:
    ``{"labels", "scores", "fresh"}``, every label at ``threshold`` or more); an
    embedding gives ``{"embedding", "fresh"}`` only with ``keep_embedding``. An
    object the model does not read (``on``) has no value.
    """
    values: list[dict[str, Any] | None] = []
    for row in range(len(attributes.read)):
        if not attributes.read[row]:
            values.append(None)
            continue
        fresh = bool(attributes.fresh[row])
        if attributes.embeddings is not None:
            vector = attributes.embeddings[row]
            kept = {"embedding": [round(float(v), 5) for v in vector], "fresh": fresh}
            values.append(kept if keep_embedding else None)
        elif multi_label and attributes.probabilities is not None:
            chosen = np.flatnonzero(labels_given(attributes.probabilities[row], threshold))
            values.append(
                {
                    "labels": [labels[i] for i in chosen],
                    "scores": [round(float(attributes.probabilities[row, i]), 4) for i in chosen],
                    "fresh": fresh,
                }
            )
        else:
            label = int(attributes.label_ids[row])
            score = round(float(attributes.scores[row]), 4)
            values.append({"label": labels[label], "score": score, "fresh": fresh})
    return values


class AttributeCache:
    """The last reading of each track for one secondary model and one stream."""

    def __init__(self, reinfer_seconds: float, regrow: float) -> None:
        self.reinfer_seconds = reinfer_seconds
        self.regrow = regrow
        self._readings: dict[int, tuple[float, float, SecondaryOutput]] = {}
        """track id -> (pts read at, box area then, the one-row reading)."""
        self._last_pts: float | None = None

    def __len__(self) -> int:
        return len(self._readings)

    def due(self, track_ids: np.ndarray, boxes: np.ndarray, pts: float) -> np.ndarray:
        """``(N,)`` bool: the detections to read in this frame.

        Untracked ones always; a tracked one without a reading, with one at least
        ``reinfer_seconds`` old, or whose box's area has reached ``regrow`` times
        the area it was read at.
        """
        if self._last_pts is not None and pts < self._last_pts:
            self._readings.clear()  # time went back: a new scene, as for the tracker
        self._last_pts = pts
        areas = _areas(boxes)
        due = np.ones(len(track_ids), dtype=bool)
        for row, track in enumerate(track_ids.tolist()):
            kept = self._readings.get(track) if track != NO_TRACK else None
            if kept is not None:
                read_at, area, _ = kept
                due[row] = pts - read_at >= self.reinfer_seconds or (
                    areas[row] >= self.regrow * area
                )
        return due

    def resolve(
        self,
        track_ids: np.ndarray,
        boxes: np.ndarray,
        pts: float,
        selected: np.ndarray,
        read: Callable[[np.ndarray], SecondaryOutput],
        *,
        read_all: bool = False,
    ) -> Attributes:
        """Every detection's attributes: read where due, carried where not.

        ``selected`` (``(N,)`` bool, :meth:`SecondaryModel.select`) are the
        detections the model reads at all; ``read(rows)`` reads the boxes at
        ``rows`` (indices into the frame's detections) and returns one row each,
        in that order (``lambda rows: model.run(frame, boxes[rows])``). It is
        called once per frame, with no rows when nothing is due. ``read_all``:
        every selected detection is due (its reading was made anyway).

        A row read as no numbers (NaN, infinity: :meth:`SecondaryOutput.readable`)
        leaves its detection unread in this frame, neither fresh nor carried, and
        its track's last reading as it was.
        """
        track_ids = np.asarray(track_ids, dtype=np.int64)
        count = len(track_ids)
        selected = np.array(selected, dtype=bool)  # a copy: unreadable rows leave it
        due = self.due(track_ids, boxes, pts)
        if read_all:
            due[:] = True
        due &= selected
        rows = np.flatnonzero(due)
        fresh = read(rows)
        readable = fresh.readable()
        if not readable.all():
            selected[rows[~readable]] = False
            due &= selected
            rows, fresh = rows[readable], fresh.take(readable)
        carried = np.flatnonzero(selected & ~due)
        parts = [fresh, *(self._readings[int(track_ids[r])][2] for r in carried)]
        order = np.concatenate([rows, carried])
        areas = _areas(boxes)
        for index, row in enumerate(rows.tolist()):
            track = int(track_ids[row])
            if track != NO_TRACK:
                self._readings[track] = (pts, float(areas[row]), fresh.take([index]))
        return _assemble(count, order, parts, due)

    def carried(
        self, track_ids: np.ndarray, selected: np.ndarray, empty: SecondaryOutput
    ) -> Attributes:
        """The last readings of the ``selected`` detections' tracks, none read now.

        For a frame the detector skipped: its boxes are the tracker's
        predictions, so its objects keep what they were last read as (not
        fresh); an object on no track, or not read yet, has no value. ``empty``
        is the model's result for no boxes (it gives the columns' widths).
        """
        track_ids = np.asarray(track_ids, dtype=np.int64)
        selected = np.asarray(selected, dtype=bool)
        rows = [
            row
            for row in np.flatnonzero(selected).tolist()
            if int(track_ids[row]) in self._readings
        ]
        parts = [empty, *(self._readings[int(track_ids[r])][2] for r in rows)]
        order = np.asarray(rows, dtype=np.int64)
        return _assemble(len(track_ids), order, parts, np.zeros(len(track_ids), dtype=bool))

    def last(self, track_id: int) -> SecondaryOutput | None:
        """The track's last reading (one row), or None if it has none."""
        kept = self._readings.get(track_id)
        return None if kept is None else kept[2]

    def retain(self, live_track_ids: Iterable[int]) -> None:
        """Drop the readings of every track not in ``live_track_ids`` (the tracker's live ones)."""
        live = set(live_track_ids)
        for track in [t for t in self._readings if t not in live]:
            del self._readings[track]

    def reset(self) -> None:
        self._readings.clear()
        self._last_pts = None


def _areas(boxes: np.ndarray) -> np.ndarray:
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.maximum(boxes[:, 2] - boxes[:, 0], 0) * np.maximum(boxes[:, 3] - boxes[:, 1], 0)


def _assemble(
    count: int, order: np.ndarray, parts: list[SecondaryOutput], due: np.ndarray
) -> Attributes:
    """Scatter the fresh and carried rows (``parts``, rows ``order``) into frame order."""
    label_ids = np.full(count, -1, dtype=np.int64)
    scores = np.full(count, np.nan, dtype=np.float32)
    read = np.zeros(count, dtype=bool)
    read[order] = True
    first = parts[0]
    probabilities = embeddings = None
    if order.size:
        label_ids[order] = np.concatenate([p.label_ids for p in parts])
        scores[order] = np.concatenate([p.scores for p in parts])
    if first.probabilities is not None:
        probabilities = np.full((count, first.probabilities.shape[1]), np.nan, np.float32)
        if order.size:
            probabilities[order] = np.concatenate([p.probabilities for p in parts])
    if first.embeddings is not None:
        embeddings = np.zeros((count, first.embeddings.shape[1]), np.float32)
        if order.size:
            embeddings[order] = np.concatenate([p.embeddings for p in parts])
    return Attributes(label_ids, scores, due & read, read, embeddings, probabilities)


__all__ = ["AttributeCache", "Attributes", "record_values"]
