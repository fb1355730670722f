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

Many streams at once: :func:`update_together` takes one frame for each of
several trackers and runs the steps above once over all of them (their tracks
and detections stacked, :mod:`.stacked`), pairing only a stream's own tracks
and detections and solving each stream's assignment alone. Each stream gets
exactly what :meth:`ByteTracker.update` would give it; what changes is the
count of numpy calls, which is what a handful of objects per frame costs.
The pipeline steps a batch's streams this way (:mod:`vstream.engine.pipeline`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from vstream.config.tracking import DEFAULT_CONF, TrackingConfig
from vstream.results import NO_TRACK
from vstream.tracking import kalman
from vstream.tracking.appearance import AppearanceBank, blend_costs, cosine_distance
from vstream.tracking.base import Prediction, iou_matrix, iou_pairs
from vstream.tracking.stacked import EMPTY as _EMPTY
from vstream.tracking.stacked import Blocks, Tracks, hungarian, match

TENTATIVE, TRACKED, LOST = 0, 1, 2
"""Track states: not yet confirmed; confirmed and seen in the last frame; confirmed, unseen."""

_STEP_TOLERANCE = 0.25
"""The part of a frame interval by which a span of pts may fall short of a multiple of it and
still count as it: pts are rounded to their container's time base (a millisecond in
Matroska: 30 fps steps of 33, 34 and 33 ms, so two steps span 66 or 67 ms where the last
one says 68), and a span one frame shorter stays far below."""

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
FIRST_REACH = 1.5
"""How far (in track sizes) a track's second detection may be from its first, however
close together they come: the velocity prior's gate is about 1.3 at 25 fps."""
FIRST_SPEED = kalman.INITIAL_VELOCITY_STD
"""Track sizes per second a track's second detection may add to :data:`FIRST_REACH`: one
standard deviation of the velocity prior, whose gate takes three (30 a second), so that at
one detection a second a false box and a real object anywhere in the frame a second later
made one track."""
COVERED = 0.5
"""A detection whose box lies more than this share inside a higher-scoring detection's box
has its vector ignored: its crop mostly shows the other object (the one in front)."""


class _Detections:
    """One stream's frame as :meth:`ByteTracker.update` takes it, checked and converted."""

    __slots__ = ("boxes", "class_ids", "pts", "scores")

    def __init__(
        self, boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, pts_seconds: float
    ) -> None:
        self.boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        self.scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        self.class_ids = np.asarray(class_ids, dtype=np.int64).reshape(-1)
        if not len(self.boxes) == len(self.scores) == len(self.class_ids):
            raise ValueError(
                f"{len(self.boxes)} boxes, {len(self.scores)} scores and "
                f"{len(self.class_ids)} class ids: one of each per detection"
            )
        if len(self.class_ids) and self.class_ids.min() < 0:
            raise ValueError("class ids must be non-negative")
        self.pts = float(pts_seconds)
        if not math.isfinite(self.pts):
            raise ValueError(f"pts_seconds must be finite, got {pts_seconds!r}")


def _shape_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of ``x1, y1, x2, y2`` boxes moved onto the same centre (size alone), pair by pair."""
    return iou_pairs(_centred(a), _centred(b))


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
    boxes: np.ndarray,
    scores: np.ndarray,
    candidates: np.ndarray,
    stream: np.ndarray,
    streams: int,
    min_iou: float,
) -> np.ndarray:
    """Indices of candidate detections overlapping a higher-scoring candidate of their
    stream by ``min_iou``.

    Detectors run NMS per class, so one object can come out twice, as two
    classes; association ignores classes, and the copy would steal the object's
    track or start a second one. This is "fast NMS": a box is dropped even if
    the box that overlaps it is itself dropped, which only matters in piles of
    three or more near-identical boxes.
    """
    index = candidates.nonzero()[0]
    if len(index) < 2:
        return _EMPTY
    if streams == 1:
        index = index[np.argsort(-scores[index], kind="stable")]
        ranked = boxes[index]
        overlap = iou_matrix(ranked, ranked)
        overlap[_lower_triangle(len(index))] = 0.0  # a box against higher scores only
        return index[overlap.max(axis=0) >= min_iou]
    index = index[np.lexsort((-scores[index], stream[index]))]  # by stream, then score
    ranks = np.arange(len(index))
    first, second = Blocks(ranks, stream[index], ranks, stream[index], streams).positions()
    above = first < second  # a box against higher scores of its stream only
    higher, lower = first[above], second[above]
    copies = iou_pairs(boxes, boxes, index[higher], index[lower]) >= min_iou
    return index[np.unique(lower[copies])]


@functools.lru_cache(maxsize=64)
def _lower_triangle(n: int) -> np.ndarray:
    """``(n, n)`` bool, the diagonal and below: what ``np.triu(x, k=1)`` zeroes, made once a
    size (a frame's handful of detections would otherwise pay for ``triu`` every frame)."""
    mask = np.tri(n, dtype=bool)
    mask.flags.writeable = False
    return mask


class _Stacks:
    """What the association steps of one call share: the stacked tracks and detections."""

    __slots__ = ("boxes", "det_stream", "predicted", "pts", "streams", "track_stream", "tracks")

    def __init__(
        self,
        tracks: Tracks,
        track_stream: np.ndarray,
        boxes: np.ndarray,
        det_stream: np.ndarray,
        streams: int,
        pts: np.ndarray,
    ) -> None:
        self.tracks, self.track_stream = tracks, track_stream
        self.boxes, self.det_stream = boxes, det_stream
        self.streams = streams
        self.pts = pts
        """Each stream's time now."""
        self.predicted = kalman.cxcywh_to_xyxy(tracks.mean[:, :4])

    def pairs(self, rows: np.ndarray, dets: np.ndarray) -> Blocks:
        """The same-stream pairs of tracks ``rows`` and detections ``dets``."""
        return Blocks(rows, self.track_stream[rows], dets, self.det_stream[dets], self.streams)

    def cost(self, pairs: Blocks, min_iou: float) -> np.ndarray:
        """Matching cost of each pair of track and detection, in [0, 1]; inf: no match.

        ``1 - IoU`` with the predicted box, pairs below ``min_iou`` excluded. A
        track with a single detection has no velocity yet: its prediction is
        where it was, and an object moving more than about half its size per
        frame would never overlap it enough. Its detection may then instead lie
        within the track's predicted uncertainty (:func:`kalman.centre_distance2`,
        wide for a new track) and :data:`FIRST_REACH` plus :data:`FIRST_SPEED` per
        second of its detection, with a size IoU alone would accept
        (:func:`_shape_iou`); the cost is the distance as a fraction of the gate.
        """
        if pairs.size == 0:
            return np.zeros(0)
        if pairs.single:  # the whole matrix: broadcast, no pairs gathered
            overlap = iou_matrix(self.predicted[pairs.rows], self.boxes[pairs.cols]).reshape(-1)
        else:
            rpos, cpos = pairs.positions()
            overlap = iou_pairs(self.predicted, self.boxes, pairs.rows[rpos], pairs.cols[cpos])
        cost = np.where(overlap >= min_iou, 1.0 - overlap, np.inf)
        young_rows = self.tracks.hits[pairs.rows] == 1
        if young_rows.any():
            young = pairs.pairs_of_rows(young_rows)
            rpos, cpos = pairs.positions(young)
            rows, boxes = pairs.rows[rpos], self.boxes[pairs.cols[cpos]]
            distance2 = kalman.centre_distance2(
                self.tracks.mean[rows], self.tracks.cov[rows], kalman.xyxy_to_cxcywh(boxes)
            )
            seen = self.tracks.seen[rows]
            centres = kalman.xyxy_to_cxcywh(boxes)[:, :2]
            moved = np.sqrt(((centres - seen[:, :2]) ** 2).sum(axis=1))
            since = self.pts[self.track_stream[rows]] - self.tracks.last_pts[rows]
            reach = seen[:, 2:].max(axis=1) * (FIRST_REACH + FIRST_SPEED * since)
            near = (
                (distance2 <= kalman.GATE_CHI2)
                & (moved <= reach)
                & (_shape_iou(self.predicted[rows], boxes) >= min_iou)
            )
            cost[young] = np.minimum(
                cost[young], np.where(near, distance2 / kalman.GATE_CHI2, np.inf)
            )
        return cost


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
        self._tracks = Tracks.empty()
        self._pts: float | None = None
        self._step = 0.0  # the pts step into the latest frame given: the frame interval
        self._bank = AppearanceBank(self._bank.momentum)

    @property
    def num_tracks(self) -> int:
        """Tracks held now (tentative, tracked and lost): what memory grows with."""
        return len(self._tracks)

    @property
    def num_appearances(self) -> int:
        """Track vectors held now (at most one per confirmed track)."""
        return len(self._bank)

    def live_track_ids(self) -> frozenset[int]:
        ids = self._tracks.ids
        return frozenset(ids[ids > 0].tolist())

    def track_classes(self, track_ids: np.ndarray) -> np.ndarray:
        track_ids = np.asarray(track_ids, dtype=np.int64).reshape(-1)
        ids, votes = self._tracks.ids, self._tracks.votes
        if len(ids) == 0 or votes.shape[1] == 0:
            return np.full(len(track_ids), -1, dtype=np.int64)
        # A dict over a handful of tracks: a frame's lookup costs a few numpy calls, not ten.
        # Tentative tracks share the id 0, which is never looked up.
        best = dict(zip(ids.tolist(), votes.argmax(axis=1).tolist(), strict=True))
        best.pop(0, None)
        return np.array([best.get(t, -1) for t in track_ids.tolist()], dtype=np.int64)

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
        frame = _Detections(boxes, scores, class_ids, pts_seconds)
        if embeddings is not None:
            embeddings = np.asarray(embeddings, dtype=np.float32)
            if embeddings.ndim != 2 or len(embeddings) != len(frame.boxes):
                raise ValueError(
                    f"embeddings of shape {embeddings.shape} for boxes of shape "
                    f"{frame.boxes.shape}: one row per detection, (N, D)"
                )
            if self.appearance_weight <= 0.0:
                embeddings = None
        return _step([self], [frame], embeddings)[0]

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
        tracks = self._tracks
        if still:
            tracks.mean[:, 4:] = 0.0
        dt = self._clock(pts)
        tracks = self._tracks  # a pts that went back forgot them
        _advance(tracks, dt)
        rows = (tracks.state == TRACKED).nonzero()[0]
        return Prediction(
            boxes=kalman.cxcywh_to_xyxy(tracks.mean[rows, :4]),
            track_ids=tracks.ids[rows].copy(),
            class_ids=self.track_classes(tracks.ids[rows]),
            scores=tracks.score[rows].copy(),
        )

    def _clock(self, pts: float) -> float:
        """Move the stream's clock to ``pts``; the step in seconds (a pts that goes back is a
        new scene: every track is forgotten, and the step is 0)."""
        if self._pts is not None and pts < self._pts:
            self.reset()
        dt = 0.0 if self._pts is None else pts - self._pts
        if dt > 0.0:
            self._step = dt
        self._pts = pts
        return dt

    def _reidentify(
        self,
        rows: np.ndarray,
        dets: np.ndarray,
        stack: _Stacks,
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
        tracks = self._tracks
        looks = self._bank.vectors(tracks.ids[rows], embeddings.shape[1])
        with np.errstate(invalid="ignore"):
            distance = cosine_distance(looks, embeddings[dets])
        if len(rows) == 0 or len(dets) == 0 or not (distance <= ALIKE).any():
            return _EMPTY, _EMPTY
        boxes = stack.boxes[dets]
        centres = kalman.xyxy_to_cxcywh(boxes)[:, :2]
        seen, predicted = tracks.seen[rows, :2], tracks.mean[rows, :2]
        path = predicted - seen
        length2 = np.maximum((path**2).sum(axis=1), 1e-9)
        along = ((centres[None] - seen[:, None]) * path[:, None]).sum(axis=2) / length2[:, None]
        nearest = seen[:, None] + np.clip(along, 0.0, 1.0)[..., None] * path[:, None]
        off_path = np.sqrt(((centres[None] - nearest) ** 2).sum(axis=2))
        size = np.maximum(tracks.seen[rows, 2], tracks.seen[rows, 3])
        reach = size * (REACH + (pts - tracks.last_pts[rows]))
        pairs = stack.pairs(rows, dets)
        rpos, cpos = pairs.positions()
        shapes = _shape_iou(stack.predicted[rows[rpos]], boxes[cpos])
        allowed = (
            (distance <= ALIKE)
            & (off_path <= reach[:, None])
            & (pairs.block(shapes, 0) >= self.config.match_iou)
        )
        return hungarian(np.where(allowed, distance, np.inf))

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


def update_together(
    trackers: Sequence[ByteTracker],
    frames: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, float]],
) -> list[np.ndarray]:
    """One frame for each of several streams' trackers, stepped in one pass.

    ``frames``: ``(boxes, scores, class_ids, pts_seconds)`` per tracker, as
    :meth:`ByteTracker.update` takes them. Returns each frame's track ids: the same,
    and the same tracks left behind, bit for bit, as updating each tracker alone,
    for a fraction of the numpy calls (:mod:`.stacked`). The trackers must be
    distinct and share their settings (one pipeline's streams); appearance vectors
    are not taken (a tracker that uses them is updated alone). Nothing is changed
    when a frame is refused (``ValueError``).
    """
    trackers = list(trackers)
    if len(frames) != len(trackers):
        raise ValueError(f"{len(frames)} frames for {len(trackers)} trackers: one each")
    if len({id(tracker) for tracker in trackers}) != len(trackers):
        raise ValueError("a tracker is given twice: one frame per stream a step")
    if not trackers:
        return []
    first = trackers[0]
    if any(t.config != first.config or t.thresholds != first.thresholds for t in trackers):
        raise ValueError("trackers stepped together must share their settings")
    checked = [_Detections(*frame) for frame in frames]
    return _step(trackers, checked, None)


def _step(
    trackers: list[ByteTracker], frames: list[_Detections], embeddings: np.ndarray | None
) -> list[np.ndarray]:
    """ByteTrack's frame (see the module docstring) for each tracker at once; embeddings
    only with a single tracker."""
    first = trackers[0]
    cfg, limits = first.config, first.thresholds
    n = len(trackers)
    dts = np.array(
        [tracker._clock(frame.pts) for tracker, frame in zip(trackers, frames, strict=True)]
    )
    pts = np.array([frame.pts for frame in frames])
    frame_steps = np.array([tracker._step for tracker in trackers])
    if n == 1:
        tracks, frame = first._tracks, frames[0]
        boxes, scores, class_ids = frame.boxes, frame.scores, frame.class_ids
    else:
        tracks = Tracks.concatenate([tracker._tracks for tracker in trackers])
        boxes = np.concatenate([frame.boxes for frame in frames])
        scores = np.concatenate([frame.scores for frame in frames])
        class_ids = np.concatenate([frame.class_ids for frame in frames])
    det_counts = [len(frame.boxes) for frame in frames]
    if n == 1:
        track_stream = np.zeros(len(tracks), dtype=np.int64)
        det_stream = np.zeros(len(boxes), dtype=np.int64)
    else:
        track_stream = np.repeat(np.arange(n), [len(tracker._tracks) for tracker in trackers])
        det_stream = np.repeat(np.arange(n), det_counts)

    _advance(tracks, dts[0] if n == 1 else dts[track_stream])
    valid = (
        np.isfinite(boxes).all(axis=1)
        & (boxes[:, 2] > boxes[:, 0])
        & (boxes[:, 3] > boxes[:, 1])
        & (scores >= limits.low)
    )
    valid[_duplicates(boxes, scores, valid, det_stream, n, cfg.duplicate_iou)] = False
    if embeddings is not None:
        embeddings = np.where(_covered(boxes, scores, valid)[:, None], 0.0, embeddings)
    high = (valid & (scores >= limits.high)).nonzero()[0]
    low = (valid & (scores < limits.high)).nonzero()[0]
    confirmed = (tracks.state != TENTATIVE).nonzero()[0]
    tentative = (tracks.state == TENTATIVE).nonzero()[0]
    stack = _Stacks(tracks, track_stream, boxes, det_stream, n, pts)

    # 1. High-score detections against every confirmed track, lost ones included.
    pairs = stack.pairs(confirmed, high)
    cost = stack.cost(pairs, cfg.match_iou)
    if embeddings is not None:  # one stream: the pairs are the whole matrix, row-major
        looks = first._bank.vectors(tracks.ids[confirmed], embeddings.shape[1])
        appearance = cosine_distance(looks, embeddings[high])
        blended = blend_costs(pairs.block(cost, 0), appearance, first.appearance_weight)
        blended[appearance > UNLIKE] = np.inf  # NaN (no vector) compares False: kept
        cost = blended.reshape(-1)
    t1, d1, rest_tracks, rest_high = match(pairs, cost)
    if embeddings is not None:
        # 1b. Unmatched tracks that have a look against the high-score boxes still free,
        # by look alone, near where the track could be (:meth:`_reidentify`).
        t1b, d1b = first._reidentify(
            confirmed[rest_tracks], high[rest_high], stack, embeddings, frames[0].pts
        )
        t1 = np.concatenate([t1, rest_tracks[t1b]])
        d1 = np.concatenate([d1, rest_high[d1b]])
        rest_tracks = np.delete(rest_tracks, t1b)
        rest_high = np.delete(rest_high, d1b)
    # 2. Low-score detections against the unmatched tracks seen in the previous frame.
    recent = confirmed[rest_tracks]
    recent = recent[tracks.state[recent] == TRACKED]
    pairs = stack.pairs(recent, low)
    t2, d2, _, _ = match(pairs, stack.cost(pairs, cfg.low_score_match_iou))
    # 3. Tentative tracks against the high-score detections still free.
    free_high = high[rest_high]
    pairs = stack.pairs(tentative, free_high)
    t3, d3, _, new = match(pairs, stack.cost(pairs, cfg.match_iou))

    rows = np.concatenate([confirmed[t1], recent[t2], tentative[t3]])
    dets = np.concatenate([high[d1], low[d2], free_high[d3]])
    _correct(tracks, rows, boxes[dets], scores[dets], class_ids[dets], pts[track_stream[rows]])

    unmatched = np.ones(len(tracks), dtype=bool)
    unmatched[rows] = False
    tracks.state[unmatched & (tracks.state == TRACKED)] = LOST
    tracks.state[(~unmatched) & (tracks.state == LOST)] = TRACKED
    keep = ~(unmatched & (tracks.state == TENTATIVE))
    stale = pts[track_stream] - tracks.last_pts > cfg.track_buffer_seconds
    keep &= ~((tracks.state == LOST) & stale)

    starters = free_high[new]
    starters = starters[scores[starters] >= limits.new_track]
    new_rows = np.arange(len(tracks), len(tracks) + len(starters))
    if len(starters):
        born = _started(
            boxes[starters], scores[starters], class_ids[starters], pts[det_stream[starters]]
        )
        keep = np.concatenate([keep, np.ones(len(starters), dtype=bool)])
        tracks = Tracks.concatenate([tracks, born])
        track_stream = np.concatenate([track_stream, det_stream[starters]])
    if n > 1 and len(starters):  # a stream's new tracks go after its own, as alone
        order = np.argsort(track_stream, kind="stable")
        moved = np.empty_like(order)
        moved[order] = np.arange(len(order))
        tracks, track_stream, keep = tracks.take(order), track_stream[order], keep[order]
        rows, new_rows = moved[rows], moved[new_rows]
    rows = np.concatenate([rows, new_rows])
    dets = np.concatenate([dets, starters])
    given = _confirm(tracks, rows, track_stream, pts, frame_steps, cfg, trackers)

    track_ids = np.full(len(boxes), NO_TRACK, dtype=np.int64)
    on_confirmed = tracks.ids[rows] > 0
    track_ids[dets[on_confirmed]] = tracks.ids[rows[on_confirmed]]
    if not keep.all():
        tracks, track_stream = tracks.take(keep), track_stream[keep]
    if n == 1:
        first._tracks = tracks
        first._next_id += int(given[0])
    else:
        kept = np.bincount(track_stream, minlength=n)
        for tracker, part, count in zip(trackers, tracks.split(kept), given.tolist(), strict=True):
            tracker._tracks = part
            tracker._next_id += count
    if embeddings is not None:
        first._remember(boxes, valid, high, track_ids, embeddings)
    return np.split(track_ids, np.cumsum(det_counts)[:-1]) if n > 1 else [track_ids]


def _advance(tracks: Tracks, dt: float | np.ndarray) -> None:
    """Predict ``tracks`` ``dt`` seconds on (one for all, or one per track), in place."""
    tracks.mean[tracks.state == LOST, 6:] = 0.0  # an unseen object keeps its size
    kalman.predict(tracks.mean, tracks.cov, dt)


def _correct(
    tracks: Tracks,
    rows: np.ndarray,
    boxes: np.ndarray,
    scores: np.ndarray,
    class_ids: np.ndarray,
    pts: np.ndarray,
) -> None:
    """Kalman-correct the matched tracks and record their hits, times and class votes."""
    mean, cov = tracks.mean[rows], tracks.cov[rows]
    measured = kalman.xyxy_to_cxcywh(boxes)
    kalman.update(mean, cov, measured)
    tracks.mean[rows], tracks.cov[rows] = mean, cov
    tracks.hits[rows] += 1
    tracks.last_pts[rows] = pts
    tracks.seen[rows] = measured
    tracks.score[rows] = scores
    tracks.vote(rows, class_ids, scores)


def _started(
    boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, pts: np.ndarray
) -> Tracks:
    """Tentative tracks for unmatched confident detections (``pts``: each one's frame's)."""
    n = len(boxes)
    measured = kalman.xyxy_to_cxcywh(boxes)
    mean, cov = kalman.initiate(measured)
    born = Tracks(
        mean=mean,
        cov=cov,
        ids=np.zeros(n, dtype=np.int64),
        state=np.full(n, TENTATIVE, dtype=np.int8),
        hits=np.ones(n, dtype=np.int64),
        first_pts=pts.copy(),
        last_pts=pts.copy(),
        seen=measured,
        score=scores.copy(),
        votes=np.zeros((n, 0)),
    )
    born.vote(np.arange(n), class_ids, scores)
    return born


def _confirm(
    tracks: Tracks,
    rows: np.ndarray,
    track_stream: np.ndarray,
    pts: np.ndarray,
    frame_steps: np.ndarray,
    cfg: TrackingConfig,
    trackers: list[ByteTracker],
) -> np.ndarray:
    """Give ids, in row order per stream from its tracker's next id, to the matched
    tentative tracks that have earned them: ``confirm_hits`` detections, or two spanning as
    long as ``confirm_hits`` frames in a row would (a detection cadence: see the module
    docstring). ``pts`` and ``frame_steps``: per stream. Returns the ids given per stream."""
    stream = track_stream[rows]
    hits, lasted = tracks.hits[rows], pts[stream] - tracks.first_pts[rows]
    needed = (cfg.confirm_hits - 1 - _STEP_TOLERANCE) * frame_steps[stream]
    spans = (hits >= 2) & (lasted >= needed)
    ready = rows[
        (tracks.state[rows] == TENTATIVE)
        & ((hits >= cfg.confirm_hits) | spans)
        & (lasted >= cfg.confirm_seconds)
    ]
    if len(ready) == 0:
        return np.zeros(len(trackers), dtype=np.int64)
    ready = np.sort(ready)
    tracks.state[ready] = TRACKED
    owner = track_stream[ready]
    given = np.bincount(owner, minlength=len(trackers))
    rank = np.arange(len(ready)) - (np.cumsum(given) - given)[owner]
    next_ids = np.array([tracker._next_id for tracker in trackers], dtype=np.int64)
    tracks.ids[ready] = next_ids[owner] + rank
    return given
