"""ByteTrack-style tracking: keep the low-score boxes, they are usually occluded objects.

After Zhang et al., "ByteTrack: Multi-Object Tracking by Associating Every
Detection Box" (ECCV 2022); written here from the paper, not from any code.
Each frame:

1. every track's box is predicted to the frame's pts (:mod:`.kalman`), and
   of detections overlapping by ``duplicate_iou`` or more only the best is
   kept (the same object detected as two classes: per-class NMS keeps both);
2. high-score detections (at least ``high_score``, by default the detector's
   ``conf``) are matched to all confirmed tracks, including lost ones, by IoU
   with the Hungarian algorithm;
3. low-score detections are matched to the confirmed tracks still unmatched
   that were seen in the previous frame: a partly hidden object scores low,
   and this keeps its track alive instead of starting a new one later;
4. tentative (not yet confirmed) tracks are matched to the remaining
   high-score detections; one that misses a frame is dropped;
5. the remaining detections scoring at least ``new_track_score`` start
   tentative tracks, and lost tracks older than ``track_buffer_seconds`` are
   forgotten.

"A frame" above is a detection opportunity: a frame the detector ran on
(:meth:`ByteTracker.update`). Where a detection cadence predicts the frames
between (:meth:`ByteTracker.predict`), a tentative track is confirmed by
stream time as well as by hits: ``confirm_hits`` detections in a row at
every frame take ``confirm_hits - 1`` frame intervals, and at
``detect_every: 3`` they would take three times as long, so an object that
the detector finds only now and then (a low score hovering around the
threshold) would rarely collect them, and a confirmed object would miss
its first crossings. So a tentative track detected at every opportunity
since it started is also confirmed at its second detection once it has
lasted ``confirm_hits - 1`` frame intervals, the interval being the pts step
between the last two frames the tracker was given (detected or predicted).
Detecting every frame of a stream that drops none, that is never before
its ``confirm_hits``-th detection, so ByteTrack's rule is unchanged there.

Choices of ours:

- A new track starts at rest, so IoU with where it was would lose an object
  moving more than about half its size per frame. A track's first match is
  also accepted by centre distance, within the new track's (wide) velocity
  uncertainty at this frame's time step, which sets its velocity for the
  next frames (:meth:`ByteTracker._cost`).
- Only confirmed tracks have ids. Ids are positive, handed out in order of
  confirmation, and never reused, even after :meth:`ByteTracker.reset`.
- Association ignores the class: detectors often flicker between similar
  classes, and a track must not break when they do. Each track sums the
  scores of the classes it was detected as and reports the class with the
  largest sum (:meth:`ByteTracker.track_classes`).
- Time is the pts in seconds, so the track buffer holds at any frame rate. A
  pts that goes backwards (a looped file, a restarted camera) is a new scene:
  the tracks are forgotten.
- Memory is bounded: tracks are rows of a few arrays; a forgotten track's
  row is deleted, and nothing about it is kept.

Appearance (``tracking.appearance``, :mod:`.appearance`): when the config
names an embedding model and :meth:`ByteTracker.update` is given its vectors,
each confirmed track keeps a smoothed vector (:class:`AppearanceBank`), and:

- the cost of step 2 (high-score detections against confirmed tracks, lost
  ones included) becomes ``(1 - w) * (1 - IoU) + w * cosine distance``, ``w``
  being ``tracking.appearance_weight``. The IoU gate is unchanged, and a pair
  that looks unlike (cosine distance above :data:`UNLIKE`) is refused too:
  otherwise the Hungarian matching, which must pair what it can, hands a
  track whose own box fell out of its gate to the other object in it, which
  is exactly the swap of a crossing;
- then the tracks still unmatched that have a vector are re-identified among
  the high-score detections still free, by look alone (at most
  :data:`ALIKE`), near the path between where each was last seen and where
  it is predicted (:meth:`ByteTracker._reidentify`). This is where ID
  switches after an occlusion are won: a hidden object that stopped or turned
  back comes out far from its constant-velocity prediction, where IoU cannot
  find it and would start a new track;
- low-score boxes (step 3) stay on IoU alone: they are mostly partly hidden
  objects whose crop is half someone else's. For the same reason a detection
  whose box lies mostly (:data:`COVERED`) inside a higher-scoring one's has
  no vector this frame: the crop of an object half behind another reads as
  the one in front, and would pull the front object's track onto it. A
  track's vector is updated only from a high-score detection whose box
  overlaps no other detection, so a crossing does not blend two objects'
  looks into one.

Without vectors, or without ``tracking.appearance``, the tracker is exactly
the IoU tracker.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from vstream.config.tracking import DEFAULT_CONF, TrackingConfig
from vstream.results import NO_TRACK
from vstream.tracking import kalman
from vstream.tracking.appearance import AppearanceBank, blend_costs, cosine_distance
from vstream.tracking.base import Prediction, iou_matrix

TENTATIVE, TRACKED, LOST = 0, 1, 2
"""Track states: not yet confirmed; confirmed and seen in the last frame; confirmed, unseen."""

_EMPTY = np.zeros(0, dtype=np.int64)
_PTS_TOLERANCE = 1e-6
"""Seconds by which a span of pts may fall short of a multiple of the frame interval and still
count as it (pts are rounded to their container's time base)."""

UNLIKE = 0.35
"""With appearance, a pair of track and detection whose cosine distance (in ``[0, 1]``,
:func:`.appearance.cosine_distance`) is above this never matches: looks with a cosine
similarity below 0.3 are different objects, however well the boxes overlap. (The demo
embedder puts 95% of pairs of different objects below 0.29 and of the same object above
0.97: ``tools/demo_assets/README.md``.)"""
ALIKE = 0.15
"""Largest cosine distance (similarity at least 0.7) at which a track is re-identified by
its look alone, away from its prediction (:meth:`ByteTracker._reidentify`)."""
REACH = 1.0
"""How far (in track sizes, plus one per second unseen) from its path a track may be
re-identified."""
COVERED = 0.5
"""A detection whose box lies more than this share inside a higher-scoring detection's box
has its vector ignored: its crop mostly shows the other object (the one in front)."""


class _Overlaps:
    """One frame's IoU of every track's predicted box with every valid detection, made once:
    the three association steps each take their part of it (the tracks move only after all
    three)."""

    __slots__ = ("boxes", "iou", "predicted")

    def __init__(self, predicted: np.ndarray, boxes: np.ndarray, valid: np.ndarray) -> None:
        self.predicted, self.boxes = predicted, boxes
        self.iou = np.zeros((len(predicted), len(boxes)))
        self.iou[:, valid] = iou_matrix(predicted, boxes[valid])


def _associate(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Hungarian matching on a ``(tracks, detections)`` cost; infinite costs never match.

    Returns matched track indices, matched detection indices, unmatched track
    indices and unmatched detection indices (all into the cost's rows and columns).
    """
    n_tracks, n_dets = cost.shape
    if n_tracks == 0 or n_dets == 0:
        return _EMPTY, _EMPTY, np.arange(n_tracks), np.arange(n_dets)
    from scipy.optimize import linear_sum_assignment  # see ByteTracker.load_matcher

    rows, cols = linear_sum_assignment(np.where(np.isfinite(cost), cost, 1e6))
    good = np.isfinite(cost[rows, cols])
    rows, cols = rows[good].astype(np.int64), cols[good].astype(np.int64)
    free_rows = np.ones(n_tracks, dtype=bool)
    free_rows[rows] = False
    free_cols = np.ones(n_dets, dtype=bool)
    free_cols[cols] = False
    return rows, cols, free_rows.nonzero()[0], free_cols.nonzero()[0]


def _shape_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(N, M)`` IoU of ``x1, y1, x2, y2`` boxes moved onto the same centre: size alone."""
    return iou_matrix(_centred(a), _centred(b))


def _centred(boxes: np.ndarray) -> np.ndarray:
    """``boxes`` of the same size, centred on the origin."""
    half = (boxes[:, 2:4] - boxes[:, 0:2]) / 2
    return np.concatenate([-half, half], axis=1)


def _covered(boxes: np.ndarray, scores: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """``(N,)`` bool: candidates more than :data:`COVERED` of whose box area lies inside the
    box of a higher-scoring candidate."""
    out = np.zeros(len(boxes), dtype=bool)
    index = candidates.nonzero()[0]
    if len(index) < 2:
        return out
    b = boxes[index]
    width = np.minimum(b[:, None, 2], b[None, :, 2]) - np.maximum(b[:, None, 0], b[None, :, 0])
    height = np.minimum(b[:, None, 3], b[None, :, 3]) - np.maximum(b[:, None, 1], b[None, :, 1])
    inside = np.maximum(width, 0.0) * np.maximum(height, 0.0)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    higher = scores[index][None, :] > scores[index][:, None]
    out[index] = ((inside > COVERED * area[:, None]) & higher).any(axis=1)
    return out


def _duplicates(
    boxes: np.ndarray, scores: np.ndarray, candidates: np.ndarray, min_iou: float
) -> np.ndarray:
    """Indices of candidate detections overlapping a higher-scoring candidate by ``min_iou``.

    Detectors run NMS per class, so one object can come out twice, as two
    classes; association ignores classes, and the copy would steal the object's
    track or start a second one. This is "fast NMS": a box is dropped even if
    the box that overlaps it is itself dropped, which only matters in piles of
    three or more near-identical boxes.
    """
    index = candidates.nonzero()[0]
    if len(index) < 2:
        return _EMPTY
    index = index[np.argsort(-scores[index], kind="stable")]
    ranked = boxes[index]
    iou = iou_matrix(ranked, ranked)
    iou[_lower_triangle(len(index))] = 0.0  # a box is checked against higher scores only
    return index[iou.max(axis=0) >= min_iou]


@functools.lru_cache(maxsize=64)
def _lower_triangle(n: int) -> np.ndarray:
    """``(n, n)`` bool, the diagonal and below: what ``np.triu(x, k=1)`` zeroes, made once a
    size (a frame's handful of detections would otherwise pay for ``triu`` every frame)."""
    mask = np.tri(n, dtype=bool)
    mask.flags.writeable = False
    return mask


class ByteTracker:
    """ByteTrack-style tracker for one stream (see the module docstring)."""

    def __init__(self, config: TrackingConfig | None = None, conf: float = DEFAULT_CONF) -> None:
        """``conf`` is the score the detector was asked for: the thresholds left unset
        follow it (:meth:`TrackingConfig.thresholds`)."""
        self.config = config or TrackingConfig()
        self.thresholds = self.config.thresholds(conf)
        """The score thresholds in force."""
        self.appearance_weight = (
            float(self.config.appearance_weight) if self.config.appearance else 0.0
        )
        """Share of the first-stage cost that is appearance: ``tracking.appearance_weight``
        when ``tracking.appearance`` names a model, else 0 (embeddings are ignored)."""
        self._bank = AppearanceBank()
        self._next_id = 1
        self.reset()

    @staticmethod
    def load_matcher() -> None:
        """Import the assignment solver now rather than at the first match.

        ``scipy.optimize`` takes a second or more to import (1.2-1.3 s on the
        2-core box): met at a stream's first match, it holds up the first
        frames' delivery while a live stream drops them. Streams that track
        call this as they are set up (:class:`~vstream.analytics.StreamAnalytics`);
        it is not imported with this module, since a pipeline without tracking
        still builds its analytics and never matches.
        """
        import scipy.optimize  # noqa: F401

    def reset(self) -> None:
        """Forget every track; the next confirmed track still gets a new id."""
        self._mean = np.zeros((0, 8))
        self._cov = np.zeros((0, 4, 3))  # per-coordinate blocks (kalman)
        self._ids = np.zeros(0, dtype=np.int64)  # 0 while tentative
        self._state = np.zeros(0, dtype=np.int8)
        self._hits = np.zeros(0, dtype=np.int64)
        self._first_pts = np.zeros(0)
        self._last_pts = np.zeros(0)  # when the track last had a detection
        self._seen = np.zeros((0, 4))  # that detection's box, cx cy w h
        self._score = np.zeros(0)  # the score of that detection
        self._votes = np.zeros((0, 0))  # summed detection score per class
        self._pts: float | None = None
        self._step = 0.0  # the pts step into the latest frame given: the frame interval
        self._bank = AppearanceBank(self._bank.momentum)

    @property
    def num_tracks(self) -> int:
        """Tracks held now (tentative, tracked and lost): what memory grows with."""
        return len(self._ids)

    @property
    def num_appearances(self) -> int:
        """Track vectors held now (at most one per confirmed track)."""
        return len(self._bank)

    def live_track_ids(self) -> frozenset[int]:
        return frozenset(self._ids[self._ids > 0].tolist())

    def track_classes(self, track_ids: np.ndarray) -> np.ndarray:
        track_ids = np.asarray(track_ids, dtype=np.int64).reshape(-1)
        out = np.full(len(track_ids), -1, dtype=np.int64)
        if len(self._ids) == 0 or self._votes.shape[1] == 0:
            return out
        order = np.argsort(self._ids)
        position = np.searchsorted(self._ids[order], track_ids)
        position = np.minimum(position, len(order) - 1)
        rows = order[position]
        known = (self._ids[rows] == track_ids) & (track_ids > 0)
        out[known] = np.argmax(self._votes[rows[known]], axis=1)
        return out

    def update(
        self,
        boxes: np.ndarray,
        scores: np.ndarray,
        class_ids: np.ndarray,
        pts_seconds: float,
        embeddings: np.ndarray | None = None,
    ) -> np.ndarray:
        """Track one frame's detections; see :meth:`vstream.tracking.Tracker.update`.

        ``embeddings`` (``(N, D)`` unit rows, zeros where a detection has none) join
        the first stage's cost when :attr:`appearance_weight` is above 0, and are
        ignored otherwise.
        """
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        class_ids = np.asarray(class_ids, dtype=np.int64).reshape(-1)
        if not len(boxes) == len(scores) == len(class_ids):
            raise ValueError(
                f"{len(boxes)} boxes, {len(scores)} scores and {len(class_ids)} class ids: "
                "one of each per detection"
            )
        if embeddings is not None:
            embeddings = np.asarray(embeddings, dtype=np.float32)
            if embeddings.ndim != 2 or len(embeddings) != len(boxes):
                raise ValueError(
                    f"embeddings of shape {embeddings.shape} for boxes of shape {boxes.shape}: "
                    "one row per detection, (N, D)"
                )
            if self.appearance_weight <= 0.0:
                embeddings = None
        if len(class_ids) and class_ids.min() < 0:
            raise ValueError("class ids must be non-negative")
        pts = float(pts_seconds)
        if not math.isfinite(pts):
            raise ValueError(f"pts_seconds must be finite, got {pts_seconds!r}")
        self._advance(pts)
        return self._associate_frame(boxes, scores, class_ids, pts, embeddings)

    def predict(self, pts_seconds: float, *, still: bool = False) -> Prediction:
        """Where the tracks seen at the last detection are at ``pts_seconds``, without detecting.

        For the frames between detections (:mod:`vstream.engine.cadence`): the
        Kalman predict step :meth:`update` runs first, alone. A constant-velocity
        prediction over ``a`` then ``b`` seconds is exactly the one over
        ``a + b``, so the next :meth:`update` associates as if these frames had
        never been seen. Only confirmed tracks matched at the last detection come
        out: a tentative track has no id, and a lost one no box worth showing.

        ``still``: the picture has not changed since the last detection (the
        motion gate says so), so nothing moved: every track stops where it is,
        rather than drifting on at its last velocity across a frozen scene.
        """
        pts = float(pts_seconds)
        if not math.isfinite(pts):
            raise ValueError(f"pts_seconds must be finite, got {pts_seconds!r}")
        if still:
            self._mean[:, 4:] = 0.0
        self._advance(pts)
        rows = (self._state == TRACKED).nonzero()[0]
        return Prediction(
            boxes=kalman.cxcywh_to_xyxy(self._mean[rows, :4]),
            track_ids=self._ids[rows].copy(),
            class_ids=self.track_classes(self._ids[rows]),
            scores=self._score[rows].copy(),
        )

    def _advance(self, pts: float) -> None:
        """Move every track to ``pts`` (a pts that goes back is a new scene: all forgotten)."""
        if self._pts is not None and pts < self._pts:
            self.reset()
        dt = 0.0 if self._pts is None else pts - self._pts
        if dt > 0.0:
            self._step = dt
        self._pts = pts
        self._mean[self._state == LOST, 6:] = 0.0  # an unseen object keeps its size
        kalman.predict(self._mean, self._cov, dt)

    def _associate_frame(
        self,
        boxes: np.ndarray,
        scores: np.ndarray,
        class_ids: np.ndarray,
        pts: float,
        embeddings: np.ndarray | None,
    ) -> np.ndarray:
        cfg, limits = self.config, self.thresholds
        valid = (
            np.isfinite(boxes).all(axis=1)
            & (boxes[:, 2] > boxes[:, 0])
            & (boxes[:, 3] > boxes[:, 1])
            & (scores >= limits.low)
        )
        valid[_duplicates(boxes, scores, valid, cfg.duplicate_iou)] = False
        if embeddings is not None:
            embeddings = np.where(_covered(boxes, scores, valid)[:, None], 0.0, embeddings)
        high = (valid & (scores >= limits.high)).nonzero()[0]
        low = (valid & (scores < limits.high)).nonzero()[0]
        confirmed = (self._state != TENTATIVE).nonzero()[0]
        tentative = (self._state == TENTATIVE).nonzero()[0]
        overlaps = _Overlaps(kalman.cxcywh_to_xyxy(self._mean[:, :4]), boxes, valid)

        # 1. High-score detections against every confirmed track, lost ones included.
        cost = self._cost(confirmed, high, overlaps, cfg.match_iou)
        if embeddings is not None:
            looks = self._bank.vectors(self._ids[confirmed], embeddings.shape[1])
            appearance = cosine_distance(looks, embeddings[high])
            cost = blend_costs(cost, appearance, self.appearance_weight)
            cost[appearance > UNLIKE] = np.inf  # NaN (no vector) compares False: kept
        t1, d1, rest_tracks, rest_high = _associate(cost)
        if embeddings is not None:
            # 1b. Unmatched tracks that have a look against the high-score boxes still free,
            # by look alone, near where the track could be (:meth:`_reidentify`).
            t1b, d1b = self._reidentify(
                confirmed[rest_tracks], high[rest_high], overlaps, embeddings, pts
            )
            t1 = np.concatenate([t1, rest_tracks[t1b]])
            d1 = np.concatenate([d1, rest_high[d1b]])
            rest_tracks = np.delete(rest_tracks, t1b)
            rest_high = np.delete(rest_high, d1b)
        # 2. Low-score detections against the unmatched tracks seen in the previous frame.
        recent = confirmed[rest_tracks]
        recent = recent[self._state[recent] == TRACKED]
        t2, d2, _, _ = _associate(self._cost(recent, low, overlaps, cfg.low_score_match_iou))
        # 3. Tentative tracks against the high-score detections still free.
        free_high = high[rest_high]
        t3, d3, _, new = _associate(self._cost(tentative, free_high, overlaps, cfg.match_iou))

        rows = np.concatenate([confirmed[t1], recent[t2], tentative[t3]])
        dets = np.concatenate([high[d1], low[d2], free_high[d3]])
        self._correct(rows, boxes[dets], scores[dets], class_ids[dets], pts)

        unmatched = np.ones(len(self._ids), dtype=bool)
        unmatched[rows] = False
        self._state[unmatched & (self._state == TRACKED)] = LOST
        self._state[(~unmatched) & (self._state == LOST)] = TRACKED
        keep = ~(unmatched & (self._state == TENTATIVE))
        keep &= ~((self._state == LOST) & (pts - self._last_pts > cfg.track_buffer_seconds))

        starters = free_high[new]
        starters = starters[scores[starters] >= limits.new_track]
        first_new = len(self._ids)
        self._start(boxes[starters], scores[starters], class_ids[starters], pts)
        keep = np.concatenate([keep, np.ones(len(starters), dtype=bool)])
        rows = np.concatenate([rows, np.arange(first_new, first_new + len(starters))])
        dets = np.concatenate([dets, starters])
        self._confirm(rows, pts)

        track_ids = np.full(len(boxes), NO_TRACK, dtype=np.int64)
        on_confirmed = self._ids[rows] > 0
        track_ids[dets[on_confirmed]] = self._ids[rows[on_confirmed]]
        self._keep(keep)
        if embeddings is not None:
            self._remember(boxes, valid, high, track_ids, embeddings)
        return track_ids

    def _reidentify(
        self,
        rows: np.ndarray,
        dets: np.ndarray,
        overlaps: _Overlaps,
        embeddings: np.ndarray,
        pts: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Match tracks ``rows`` to detections ``dets`` by look, where IoU could not.

        After an occlusion the motion model is often wrong: the hidden object
        stopped, turned or slowed while its prediction went on, and its box no
        longer overlaps the prediction. A pair is allowed here when the look is
        close (cosine distance at most :data:`ALIKE`), the sizes agree as the
        IoU gate would have them (:func:`_shape_iou`), and the box's centre is
        within :data:`REACH` track sizes, plus as many per second unseen, of the
        path between where the track was last seen and where it is predicted
        (the object stopped, or went on). The cost is the cosine distance.
        Returns the matched positions in ``rows`` and in ``dets``.
        """
        looks = self._bank.vectors(self._ids[rows], embeddings.shape[1])
        with np.errstate(invalid="ignore"):
            distance = cosine_distance(looks, embeddings[dets])
        if len(rows) == 0 or len(dets) == 0 or not (distance <= ALIKE).any():
            return _EMPTY, _EMPTY
        boxes = overlaps.boxes[dets]
        centres = kalman.xyxy_to_cxcywh(boxes)[:, :2]
        seen, predicted = self._seen[rows, :2], self._mean[rows, :2]
        path = predicted - seen
        length2 = np.maximum((path**2).sum(axis=1), 1e-9)
        along = ((centres[None] - seen[:, None]) * path[:, None]).sum(axis=2) / length2[:, None]
        nearest = seen[:, None] + np.clip(along, 0.0, 1.0)[..., None] * path[:, None]
        off_path = np.sqrt(((centres[None] - nearest) ** 2).sum(axis=2))
        size = np.maximum(self._seen[rows, 2], self._seen[rows, 3])
        reach = size * (REACH + (pts - self._last_pts[rows]))
        allowed = (
            (distance <= ALIKE)
            & (off_path <= reach[:, None])
            & (_shape_iou(overlaps.predicted[rows], boxes) >= self.config.match_iou)
        )
        matched_rows, matched_dets, _, _ = _associate(np.where(allowed, distance, np.inf))
        return matched_rows, matched_dets

    def _remember(
        self,
        boxes: np.ndarray,
        valid: np.ndarray,
        high: np.ndarray,
        track_ids: np.ndarray,
        embeddings: np.ndarray,
    ) -> None:
        """Fold the vectors of the tracked high-score detections that overlap no other
        detection into their tracks' (a crossing would mix two looks), and forget the
        vectors of the tracks no longer kept."""
        on_track = high[track_ids[high] > 0]
        if len(on_track):
            others = valid.nonzero()[0]
            overlap = iou_matrix(boxes[on_track], boxes[others])
            overlap[on_track[:, None] == others[None, :]] = 0.0
            alone = on_track[~(overlap > 0.0).any(axis=1)]
            self._bank.update(track_ids[alone], embeddings[alone])
        self._bank.retain(self.live_track_ids())

    def _cost(
        self, rows: np.ndarray, dets: np.ndarray, overlaps: _Overlaps, min_iou: float
    ) -> np.ndarray:
        """Matching cost of tracks ``rows`` and detections ``dets``, in [0, 1]; inf: no match.

        ``1 - IoU`` with the predicted box, pairs below ``min_iou`` excluded. A
        track with a single detection has no velocity yet: its prediction is
        where it was, and an object moving more than about half its size per
        frame would never overlap it enough. Its detection may then instead lie
        within the track's predicted uncertainty (:func:`kalman.centre_distance2`,
        wide for a new track) with a size IoU alone would accept
        (:func:`_shape_iou`); the cost is the distance as a fraction of the gate.
        """
        predicted, boxes = overlaps.predicted[rows], overlaps.boxes[dets]
        iou = overlaps.iou[rows[:, None], dets]
        cost = np.where(iou >= min_iou, 1.0 - iou, np.inf)
        young = self._hits[rows] == 1
        if young.any() and len(boxes):
            rows_young = rows[young]
            distance2 = kalman.centre_distance2(
                self._mean[rows_young], self._cov[rows_young], kalman.xyxy_to_cxcywh(boxes)
            )
            near = (distance2 <= kalman.GATE_CHI2) & (
                _shape_iou(predicted[young], boxes) >= min_iou
            )
            cost[young] = np.minimum(
                cost[young], np.where(near, distance2 / kalman.GATE_CHI2, np.inf)
            )
        return cost

    def _correct(
        self,
        rows: np.ndarray,
        boxes: np.ndarray,
        scores: np.ndarray,
        class_ids: np.ndarray,
        pts: float,
    ) -> None:
        """Kalman-correct the matched tracks and record their hits and class votes."""
        mean, cov = self._mean[rows], self._cov[rows]
        measured = kalman.xyxy_to_cxcywh(boxes)
        kalman.update(mean, cov, measured)
        self._mean[rows], self._cov[rows] = mean, cov
        self._hits[rows] += 1
        self._last_pts[rows] = pts
        self._seen[rows] = measured
        self._score[rows] = scores
        self._vote(rows, class_ids, scores)

    def _vote(self, rows: np.ndarray, class_ids: np.ndarray, scores: np.ndarray) -> None:
        if len(class_ids) and class_ids.max() >= self._votes.shape[1]:
            grown = np.zeros((len(self._votes), int(class_ids.max()) + 1))
            grown[:, : self._votes.shape[1]] = self._votes
            self._votes = grown
        np.add.at(self._votes, (rows, class_ids), scores)

    def _start(
        self, boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, pts: float
    ) -> None:
        """Append tentative tracks for unmatched confident detections."""
        n = len(boxes)
        if n == 0:
            return
        mean, cov = kalman.initiate(kalman.xyxy_to_cxcywh(boxes))
        first = len(self._ids)
        self._mean = np.concatenate([self._mean, mean])
        self._cov = np.concatenate([self._cov, cov])
        self._ids = np.concatenate([self._ids, np.zeros(n, dtype=np.int64)])
        self._state = np.concatenate([self._state, np.full(n, TENTATIVE, dtype=np.int8)])
        self._hits = np.concatenate([self._hits, np.ones(n, dtype=np.int64)])
        self._first_pts = np.concatenate([self._first_pts, np.full(n, pts)])
        self._last_pts = np.concatenate([self._last_pts, np.full(n, pts)])
        self._seen = np.concatenate([self._seen, kalman.xyxy_to_cxcywh(boxes)])
        self._score = np.concatenate([self._score, scores])
        self._votes = np.concatenate([self._votes, np.zeros((n, self._votes.shape[1]))])
        self._vote(np.arange(first, first + n), class_ids, scores)

    def _confirm(self, rows: np.ndarray, pts: float) -> None:
        """Give ids, in row order, to the matched tentative tracks that have earned them:
        ``confirm_hits`` detections, or two spanning as long as ``confirm_hits`` frames in a
        row would (a detection cadence: see the module docstring)."""
        cfg = self.config
        hits, lasted = self._hits[rows], pts - self._first_pts[rows]
        spans = (hits >= 2) & (lasted >= (cfg.confirm_hits - 1) * self._step - _PTS_TOLERANCE)
        ready = rows[
            (self._state[rows] == TENTATIVE)
            & ((hits >= cfg.confirm_hits) | spans)
            & (lasted >= cfg.confirm_seconds)
        ]
        ready = np.sort(ready)
        self._state[ready] = TRACKED
        self._ids[ready] = np.arange(self._next_id, self._next_id + len(ready))
        self._next_id += len(ready)

    def _keep(self, keep: np.ndarray) -> None:
        if keep.all():
            return
        self._mean, self._cov = self._mean[keep], self._cov[keep]
        self._ids, self._state, self._hits = self._ids[keep], self._state[keep], self._hits[keep]
        self._first_pts, self._last_pts = self._first_pts[keep], self._last_pts[keep]
        self._seen = self._seen[keep]
        self._score = self._score[keep]
        self._votes = self._votes[keep]
