"""Several streams' tracks in one set of arrays, and the pairs that may match within each.

ByteTrack's step is a few dozen numpy operations over a handful of tracks, so for one
stream what a frame costs is numpy's per-call overhead, not arithmetic (about 0.3 ms at
five objects on the 2-core box). Where a batch brings frames of many streams, they are
stepped together instead (:func:`vstream.tracking.bytetrack.update_together`): their
tracks stacked stream after stream (:class:`Tracks`), their detections likewise, and each
operation runs once over all of them. Only a stream's own tracks and detections are ever
paired (:class:`Blocks`), and each stream's assignment is its own (:func:`match`), so every
stream gets what it would alone, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

EMPTY = np.zeros(0, dtype=np.int64)
"""No indices."""


@dataclass(slots=True)
class Tracks:
    """Tracks as rows of arrays: one stream's, or several streams' one after another."""

    mean: np.ndarray
    """``(N, 8)`` Kalman state (:mod:`.kalman`)."""
    cov: np.ndarray
    """``(N, 4, 3)`` per-coordinate covariance blocks (:mod:`.kalman`)."""
    ids: np.ndarray
    """``(N,)`` int64 track ids, 0 while tentative."""
    state: np.ndarray
    """``(N,)`` int8: tentative, tracked or lost (:mod:`.bytetrack`)."""
    hits: np.ndarray
    """``(N,)`` int64 detections matched so far."""
    first_pts: np.ndarray
    """``(N,)`` seconds: when the track started."""
    last_pts: np.ndarray
    """``(N,)`` seconds: when the track last had a detection."""
    seen: np.ndarray
    """``(N, 4)`` that detection's box, ``cx, cy, w, h``."""
    score: np.ndarray
    """``(N,)`` that detection's score."""
    votes: np.ndarray
    """``(N, C)`` summed detection score per class id."""

    @classmethod
    def empty(cls) -> Tracks:
        return cls(
            mean=np.zeros((0, 8)),
            cov=np.zeros((0, 4, 3)),
            ids=np.zeros(0, dtype=np.int64),
            state=np.zeros(0, dtype=np.int8),
            hits=np.zeros(0, dtype=np.int64),
            first_pts=np.zeros(0),
            last_pts=np.zeros(0),
            seen=np.zeros((0, 4)),
            score=np.zeros(0),
            votes=np.zeros((0, 0)),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: np.ndarray) -> Tracks:
        """The tracks at ``rows`` (indices or a boolean mask), in that order: copies."""
        return Tracks(*(getattr(self, name)[rows] for name in _FIELDS))

    @classmethod
    def concatenate(cls, parts: Sequence[Tracks]) -> Tracks:
        """``parts`` one after another; class votes padded with zeros to the widest."""
        width = max(part.votes.shape[1] for part in parts)
        votes = [
            part.votes if part.votes.shape[1] == width else _widened(part.votes, width)
            for part in parts
        ]
        columns = {
            name: np.concatenate([getattr(part, name) for part in parts])
            for name in _FIELDS
            if name != "votes"
        }
        return cls(**(columns | {"votes": np.concatenate(votes)}))

    def split(self, counts: Sequence[int] | np.ndarray) -> list[Tracks]:
        """Consecutive runs of ``counts`` rows (views, not copies)."""
        bounds = np.cumsum(counts).tolist()
        starts = [0, *bounds[:-1]]
        return [
            Tracks(*(getattr(self, name)[start:stop] for name in _FIELDS))
            for start, stop in zip(starts, bounds, strict=True)
        ]

    def vote(self, rows: np.ndarray, class_ids: np.ndarray, scores: np.ndarray) -> None:
        """Add each score to its row's class, the columns grown to the largest class id."""
        if len(class_ids) and class_ids.max() >= self.votes.shape[1]:
            self.votes = _widened(self.votes, int(class_ids.max()) + 1)
        np.add.at(self.votes, (rows, class_ids), scores)


_FIELDS = tuple(Tracks.__dataclass_fields__)


def _widened(votes: np.ndarray, width: int) -> np.ndarray:
    """``votes`` with zero columns added up to ``width``."""
    wide = np.zeros((len(votes), width))
    wide[:, : votes.shape[1]] = votes
    return wide


class Blocks:
    """Every pair of a track in ``rows`` and a detection in ``cols`` of the same stream.

    ``rows`` and ``cols`` are indices into stacked tracks and detections, ascending by
    stream (``row_stream`` and ``col_stream``: each one's stream, ``0 .. streams-1``). The
    pairs come stream by stream, row-major within each, so a stream's slice of any per-pair
    array reshapes to its ``(rows, cols)`` block: with one stream, to the whole matrix,
    and then no per-pair index is built until asked for (one stream is the common case of
    a tracker stepped alone, where they would be most of the cost).
    """

    __slots__ = (
        "_cpos",
        "_rpos",
        "_starts",
        "_stream",
        "col_starts",
        "cols",
        "n_cols",
        "n_rows",
        "row_starts",
        "rows",
        "size",
    )

    def __init__(
        self,
        rows: np.ndarray,
        row_stream: np.ndarray,
        cols: np.ndarray,
        col_stream: np.ndarray,
        streams: int,
    ) -> None:
        self.rows, self.cols = rows, cols
        self._rpos: np.ndarray | None = None
        self._cpos: np.ndarray | None = None
        self._stream: np.ndarray | None = None
        self._starts = np.zeros(1, dtype=np.int64)
        if streams == 1:
            self.n_rows, self.n_cols = np.array([len(rows)]), np.array([len(cols)])
            self.row_starts = self.col_starts = self._starts
            self.size = len(rows) * len(cols)
            return
        self.n_rows = np.bincount(row_stream, minlength=streams)
        self.n_cols = np.bincount(col_stream, minlength=streams)
        sizes = self.n_rows * self.n_cols
        starts = self._starts = np.cumsum(sizes) - sizes
        self.row_starts = np.cumsum(self.n_rows) - self.n_rows
        self.col_starts = np.cumsum(self.n_cols) - self.n_cols
        stream = np.repeat(np.arange(streams), sizes)
        offset = np.arange(len(stream)) - starts[stream]
        width = self.n_cols[stream]
        down = offset // width
        self._rpos = self.row_starts[stream] + down
        self._cpos = self.col_starts[stream] + (offset - down * width)
        self._stream = stream
        self.size = len(stream)

    @property
    def single(self) -> bool:
        """One stream: the pairs are the whole ``(rows, cols)`` matrix, row-major."""
        return self._stream is None

    def positions(self, pairs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The positions in :attr:`rows` and :attr:`cols` of ``pairs`` (indices of pairs;
        None: all of them)."""
        if self._rpos is None or self._cpos is None:
            width = max(len(self.cols), 1)
            index = np.arange(self.size) if pairs is None else pairs
            return index // width, index % width
        if pairs is None:
            return self._rpos, self._cpos
        return self._rpos[pairs], self._cpos[pairs]

    def pairs_of_rows(self, chosen: np.ndarray) -> np.ndarray:
        """Indices of the pairs whose track is chosen (``chosen``: bool, per position in
        :attr:`rows`)."""
        if self._rpos is None:
            return np.repeat(chosen, len(self.cols)).nonzero()[0]
        return chosen[self._rpos].nonzero()[0]

    def stream_of(self, pairs: np.ndarray) -> np.ndarray:
        """The stream of each of ``pairs``."""
        return np.zeros(len(pairs), dtype=np.int64) if self._stream is None else self._stream[pairs]

    def block(self, values: np.ndarray, stream: int) -> np.ndarray:
        """``stream``'s ``(rows, cols)`` block of a per-pair array."""
        rows, cols = int(self.n_rows[stream]), int(self.n_cols[stream])
        start = int(self._starts[stream])
        return values[start : start + rows * cols].reshape(rows, cols)


def match(
    blocks: Blocks, cost: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each stream's minimum-cost assignment of its pairs; infinite costs never match.

    Returns the matched positions in ``blocks.rows`` and in ``blocks.cols``, then the
    unmatched positions of each, ascending. A stream whose finite pairs share no track and
    no detection has one assignment only, those pairs (any other leaves a pair out, or
    takes an infinite cost): it is taken as it is. The others are solved by the Hungarian
    algorithm (:func:`hungarian`), one block each.
    """
    if blocks.size == 0:
        return EMPTY, EMPTY, np.arange(len(blocks.rows)), np.arange(len(blocks.cols))
    free_rows = np.ones(len(blocks.rows), dtype=bool)
    free_cols = np.ones(len(blocks.cols), dtype=bool)
    finite = np.isfinite(cost).nonzero()[0]
    rows, cols = blocks.positions(finite)
    if len(rows):
        shared = (np.bincount(rows, minlength=len(free_rows)) > 1)[rows]
        shared |= (np.bincount(cols, minlength=len(free_cols)) > 1)[cols]
        if shared.any() and blocks.single:  # one stream: solve its matrix
            rows, cols = hungarian(blocks.block(cost, 0))
        elif shared.any():
            stream_of = blocks.stream_of(finite)
            contested = np.unique(stream_of[shared])
            plain = ~np.isin(stream_of, contested)
            row_parts, col_parts = [rows[plain]], [cols[plain]]
            for stream in contested.tolist():
                down, across = hungarian(blocks.block(cost, stream))
                row_parts.append(blocks.row_starts[stream] + down)
                col_parts.append(blocks.col_starts[stream] + across)
            rows, cols = np.concatenate(row_parts), np.concatenate(col_parts)
        free_rows[rows] = False
        free_cols[cols] = False
    return rows, cols, free_rows.nonzero()[0], free_cols.nonzero()[0]


UNMATCHED_COST = 0.5
"""What leaving a track or a detection unmatched costs, against the pairs' costs (at most 1):
any allowed pair alone is worth taking, but two poor pairs (IoU 0.4 and 0.3: costs 0.6 and
0.7) are not worth more than one perfect match and two left over (0 + 0.5 + 0.5), as with
ByteTrack's ``lapjv(..., extend_cost=True, cost_limit=...)``."""


def hungarian(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost assignment of a ``(rows, cols)`` cost in which any row or column may stay
    unmatched at :data:`UNMATCHED_COST`; infinite costs never match. Returns the matched rows
    and columns.

    Solved as the square problem whose extra columns are each row's "unmatched" and extra
    rows each column's (the usual extension): forcing the most pairs instead (the refused
    ones at a large finite cost) gave an object's perfect box to a hidden neighbour's track,
    and its own track a loose box beside it, to have two pairs rather than one.
    """
    from scipy.optimize import linear_sum_assignment  # see ByteTracker.load_matcher

    n_rows, n_cols = cost.shape
    square = np.full((n_rows + n_cols, n_cols + n_rows), np.inf)
    square[:n_rows, :n_cols] = cost
    square[:n_rows, n_cols:][np.diag_indices(n_rows)] = UNMATCHED_COST
    square[n_rows:, :n_cols][np.diag_indices(n_cols)] = UNMATCHED_COST
    square[n_rows:, n_cols:] = 0.0
    rows, cols = linear_sum_assignment(square)
    pair = (rows < n_rows) & (cols < n_cols)
    return rows[pair].astype(np.int64), cols[pair].astype(np.int64)
