"""Tracking accuracy (CLEAR MOT and identity metrics) and line-count errors against ground truth.

Why our own: ``motmetrics`` (MIT) needs pandas and its IoU helper calls
``np.asfarray``, which numpy 2 removed; the ``trackeval`` wheel on PyPI pulls
in OpenCV, matplotlib and pycocotools. The metrics are short enough to write
down exactly, and the tests check them on cases small enough to count by hand.

Ground truth is the detection ground truth of :mod:`vstream.evaluation`,
extended compatibly:

- each frame may carry ``"ids"``, one object identity per box, in box order, no
  two alike;
- a top-level ``"lines"`` may list counting lines with their true crossings:
  ``{"name": "gate", "start": [x, y], "end": [x, y], "anchor": "bottom_center",
  "crossings": [{"frame": 41, "id": 3, "direction": "in"}, ...]}``.

Ground truth describes one stream. Records of several streams (a pipeline
with many sources writes them to one file) are scored against the stream the
ground truth names in a top-level ``"stream"``, or the one given as
``stream=`` (``vstream eval --stream``); with neither, the records must hold
one stream. Frames are never matched across streams (:func:`select_stream`).

Predictions are frame records (as ``vstream run`` writes them): detections
with a ``track_id`` are the tracker's output; detections without one are not
tracks and are ignored here. Matching is class-agnostic (tracks are too).

Definitions (Bernardin and Stiefelhagen 2008; Ristani et al. 2016):

- per frame, a truth object keeps the track it was matched to last time if
  their IoU is still at least the threshold; the others are matched by the
  Hungarian algorithm on IoU among pairs at or above the threshold;
- an ID switch is a truth object matched to a different track than the last
  track it was matched to;
- MOTA = 1 - (misses + false positives + ID switches) / truth boxes;
- IDF1 = 2 IDTP / (truth boxes + predicted boxes), where IDTP is the number of
  frames in which a truth trajectory and a track overlap at the threshold,
  summed over the one-to-one pairing of trajectories with tracks that
  maximises it (a global bipartite matching over the whole video).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from vstream.tracking.base import iou_matrix


@dataclass(frozen=True)
class TrackingAccuracy:
    """CLEAR MOT and identity metrics of a run's tracks."""

    mota: float
    idf1: float
    id_switches: int
    false_positives: int
    misses: int
    matches: int
    truth_boxes: int
    predicted_boxes: int
    truth_objects: int
    predicted_tracks: int
    idtp: int
    mean_iou: float
    """Mean IoU of the matched pairs (MOTP as overlap)."""

    def __str__(self) -> str:
        return (
            f"MOTA {self.mota:.3f} IDF1 {self.idf1:.3f} (ID switches {self.id_switches}, "
            f"false positives {self.false_positives}, misses {self.misses}, "
            f"{self.truth_boxes} truth boxes of {self.truth_objects} objects, "
            f"{self.predicted_tracks} tracks, mean IoU {self.mean_iou:.3f})"
        )


@dataclass(frozen=True)
class LineCount:
    """Crossings of one line in one direction: counted by the run and in the ground truth."""

    line: str
    direction: str
    predicted: int
    truth: int

    @property
    def error(self) -> int:
        return self.predicted - self.truth

    def __str__(self) -> str:
        return (
            f"line {self.line} {self.direction}: {self.predicted} counted, {self.truth} true "
            f"(error {self.error:+d})"
        )


def select_stream(
    records: Iterable[Mapping[str, Any]],
    ground_truth: Mapping[str, Any],
    stream: str | None = None,
) -> list[Mapping[str, Any]]:
    """The records of the one stream ``ground_truth`` is of, each frame once.

    The stream is ``stream``, else the ground truth's ``"stream"``, else the
    only one in the records (records without a ``"stream"`` key are one
    stream). Frame numbers restart with each stream, so a wrong choice scores
    one stream's frames against another's truth: it is never guessed.
    """
    records = list(records)
    named = ground_truth.get("stream")
    if stream is not None and named is not None and stream != named:
        raise ValueError(f"the ground truth is of stream {named!r}, not {stream!r}")
    wanted = stream if stream is not None else named
    present = sorted({r.get("stream") for r in records}, key=str)
    if wanted is not None:
        records = [r for r in records if r.get("stream") == wanted]
        if not records:
            raise ValueError(f"no records of stream {wanted!r}; {_held(present)}")
    elif len(present) > 1:
        raise ValueError(
            f"the records hold {len(present)} streams ({_names(present)}) and the ground "
            'truth is of one: name it (vstream eval --stream ID, or "stream" in the ground truth)'
        )
    seen: set[int] = set()
    for record in records:
        frame = int(record["frame"])
        if frame in seen:
            raise ValueError(
                f"stream {record.get('stream')!r} has frame {frame} more than once "
                "(a looped file?): score one pass of it"
            )
        seen.add(frame)
    return records


def _names(streams: Sequence[str | None]) -> str:
    """Stream ids for a message; None (records without ``"stream"``) as ``(no stream id)``."""
    return ", ".join("(no stream id)" if name is None else str(name) for name in streams)


def _held(streams: Sequence[str | None]) -> str:
    """What streams the records hold, for a message that names another one. Records of a
    run of one source may have no ``"stream"``: they are scored when no stream is named."""
    if streams == [None]:
        return (
            "the records name no stream (a run of one source): to score them, name none "
            '(no --stream, no "stream" in the ground truth)'
        )
    return f"the records hold {_names(streams)}"


def check_coverage(
    records: Sequence[Mapping[str, Any]], ground_truth: Mapping[str, Any], stream: str | None
) -> None:
    """Refuse records the ground truth does not describe, naming what differs (a ValueError).

    ``records`` are one stream's (:func:`select_stream`). Scored anyway, a run of
    another video gives mAP 0.000 and looks like a bad model. So: the stream must be
    the ground truth's video (the stem of its ``"video"``, as ``vstream run`` names
    streams) unless ``stream`` (``--stream``) says which one it is; frames must have
    the ground truth's ``width`` and ``height``; every frame number must be one the
    ground truth covers (0 to its last), at the time stamp its ``fps`` gives that frame
    (within half a frame), as a run of every frame from the start writes it (a
    ``--start`` or ``--stride`` run numbers its frames from 0 too).
    """
    from vstream.uri import stream_id_for

    if not records:
        return
    name = records[0].get("stream")
    video = ground_truth.get("video")
    if stream is None and ground_truth.get("stream") is None and video and name is not None:
        expected = stream_id_for(str(video))
        if name != expected:
            raise ValueError(
                f"the records are of stream {name!r}, the ground truth of {video} (stream "
                f"{expected!r}); if they are a run of that video, say so: --stream {name}"
            )
    size = (ground_truth.get("width"), ground_truth.get("height"))
    if None not in size:
        other = next((r for r in records if (r.get("width"), r.get("height")) != size), None)
        if other is not None and other.get("width") is not None:
            raise ValueError(
                f"stream {name!r} has {other['width']}x{other.get('height')} frames, the "
                f"ground truth's are {size[0]}x{size[1]}"
            )
    last = max((int(f["frame"]) for f in ground_truth["frames"]), default=-1)
    beyond = sorted(int(r["frame"]) for r in records if not 0 <= int(r["frame"]) <= last)
    if beyond:
        raise ValueError(
            f"stream {name!r} has frames {beyond[0]}..{beyond[-1]} ({len(beyond)} in all) that "
            f"the ground truth does not have: it has frames 0..{last}"
        )
    fps = ground_truth.get("fps")
    if fps:
        late = next(
            (
                r
                for r in records
                if r.get("pts") is not None and abs(r["pts"] - r["frame"] / fps) > 0.5 / fps
            ),
            None,
        )
        if late is not None:
            raise ValueError(
                f"stream {name!r} has frame {late['frame']} at {late['pts']:g} s, the ground "
                f"truth's frame {late['frame']} is at {late['frame'] / fps:g} s: score a run of "
                "every frame from the start (no --start or --stride)"
            )


def has_identities(ground_truth: Mapping[str, Any]) -> bool:
    """Whether the ground truth gives object identities (``"ids"`` in its frames; ``null``
    is none, as the ground truth's schema reads it)."""
    return any(frame.get("ids") is not None for frame in ground_truth.get("frames", []))


def has_tracks(records: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any detection in the records carries a ``track_id``."""
    return any(det.get("track_id") is not None for r in records for det in r.get("detections", []))


def _truth_by_frame(ground_truth: Mapping[str, Any]) -> dict[int, tuple[np.ndarray, list[Any]]]:
    truth = {}
    for frame in ground_truth["frames"]:
        boxes = [box[:4] for box in frame["boxes"]]
        ids = list(frame.get("ids") or [])
        if len(ids) != len(boxes):
            raise ValueError(
                f"frame {frame['frame']}: {len(boxes)} boxes but {len(ids)} ids in the ground truth"
            )
        truth[int(frame["frame"])] = (np.asarray(boxes, dtype=np.float64).reshape(-1, 4), ids)
    return truth


def _tracks_by_frame(records: Iterable[Mapping[str, Any]]) -> dict[int, tuple[np.ndarray, list]]:
    tracks = {}
    for record in records:
        dets = [d for d in record["detections"] if d.get("track_id") is not None]
        boxes = np.asarray([d["bbox"] for d in dets], dtype=np.float64).reshape(-1, 4)
        tracks[int(record["frame"])] = (boxes, [int(d["track_id"]) for d in dets])
    return tracks


def evaluate_tracks(
    records: Iterable[Mapping[str, Any]],
    ground_truth: Mapping[str, Any],
    iou_threshold: float = 0.5,
    stream: str | None = None,
) -> TrackingAccuracy:
    """Score the tracks in ``records`` against the identities in ``ground_truth``.

    Only frames listed in the ground truth are scored; a frame missing from the
    records counts all its objects as misses. ``stream``: see :func:`select_stream`.
    """
    truth = _truth_by_frame(ground_truth)
    tracks = _tracks_by_frame(select_stream(records, ground_truth, stream))
    last_match: dict[Any, int] = {}
    overlap: Counter[tuple[Any, int]] = Counter()
    switches = false_positives = misses = matches = truth_boxes = predicted_boxes = 0
    ious: list[float] = []
    truth_ids: set[Any] = set()
    track_ids: set[int] = set()
    for frame in sorted(truth):
        gt_boxes, gt_ids = truth[frame]
        hyp_boxes, hyp_ids = tracks.get(frame, (np.zeros((0, 4)), []))
        truth_ids.update(gt_ids)
        track_ids.update(hyp_ids)
        truth_boxes += len(gt_ids)
        predicted_boxes += len(hyp_ids)
        iou = iou_matrix(gt_boxes, hyp_boxes)
        close = iou >= iou_threshold
        for g, h in zip(*np.nonzero(close), strict=True):
            overlap[gt_ids[g], hyp_ids[h]] += 1

        pairs = _match_frame(iou, close, gt_ids, hyp_ids, last_match)
        for g, h in pairs:
            previous = last_match.get(gt_ids[g])
            if previous is not None and previous != hyp_ids[h]:
                switches += 1
            last_match[gt_ids[g]] = hyp_ids[h]
            ious.append(float(iou[g, h]))
        matches += len(pairs)
        misses += len(gt_ids) - len(pairs)
        false_positives += len(hyp_ids) - len(pairs)

    idtp = _identity_true_positives(overlap)
    return TrackingAccuracy(
        mota=1.0 - (misses + false_positives + switches) / truth_boxes if truth_boxes else 0.0,
        idf1=2 * idtp / (truth_boxes + predicted_boxes) if truth_boxes + predicted_boxes else 0.0,
        id_switches=switches,
        false_positives=false_positives,
        misses=misses,
        matches=matches,
        truth_boxes=truth_boxes,
        predicted_boxes=predicted_boxes,
        truth_objects=len(truth_ids),
        predicted_tracks=len(track_ids),
        idtp=idtp,
        mean_iou=float(np.mean(ious)) if ious else 0.0,
    )


def _match_frame(
    iou: np.ndarray,
    close: np.ndarray,
    gt_ids: Sequence[Any],
    hyp_ids: Sequence[int],
    last_match: Mapping[Any, int],
) -> list[tuple[int, int]]:
    """One frame's truth-to-track pairs: kept correspondences first, then Hungarian. A truth
    object never matched has no entry in ``last_match`` (None), never a track id: any int,
    -1 too, can be a track's."""
    pairs = []
    free_gt = np.ones(len(gt_ids), dtype=bool)
    free_hyp = np.ones(len(hyp_ids), dtype=bool)
    column = {track_id: h for h, track_id in enumerate(hyp_ids)}
    for g, gt_id in enumerate(gt_ids):
        previous = last_match.get(gt_id)
        h = column.get(previous) if previous is not None else None
        if h is not None and free_hyp[h] and close[g, h]:
            pairs.append((g, h))
            free_gt[g] = free_hyp[h] = False
    rows, cols = np.flatnonzero(free_gt), np.flatnonzero(free_hyp)
    if len(rows) and len(cols):
        cost = np.where(close[np.ix_(rows, cols)], 1.0 - iou[np.ix_(rows, cols)], 1e6)
        for r, c in zip(*linear_sum_assignment(cost), strict=True):
            if cost[r, c] < 1e6:
                pairs.append((int(rows[r]), int(cols[c])))
    return pairs


def _identity_true_positives(overlap: Mapping[tuple[Any, int], int]) -> int:
    """The largest total overlap of a one-to-one pairing of truth objects with tracks."""
    if not overlap:
        return 0
    truth_ids = sorted({g for g, _ in overlap}, key=str)
    track_ids = sorted({h for _, h in overlap})
    row = {g: i for i, g in enumerate(truth_ids)}
    col = {h: j for j, h in enumerate(track_ids)}
    gain = np.zeros((len(truth_ids), len(track_ids)))
    for (g, h), n in overlap.items():
        gain[row[g], col[h]] = n
    rows, cols = linear_sum_assignment(gain, maximize=True)
    return int(gain[rows, cols].sum())


def evaluate_line_counts(
    records: Iterable[Mapping[str, Any]],
    ground_truth: Mapping[str, Any],
    stream: str | None = None,
) -> list[LineCount]:
    """Crossings in the records' events against the ground truth's, per line and direction.

    ``stream``: see :func:`select_stream`.
    """
    counted: Counter[tuple[str, str]] = Counter()
    for record in select_stream(records, ground_truth, stream):
        for event in record.get("events", []):
            if event.get("type") == "line_crossing":
                counted[event["line"], event["direction"]] += 1
    results = []
    for line in ground_truth.get("lines", []):
        true: defaultdict[str, int] = defaultdict(int)
        for crossing in line["crossings"]:
            true[crossing["direction"]] += 1
        for direction in ("in", "out"):
            results.append(
                LineCount(
                    line["name"], direction, counted[line["name"], direction], true[direction]
                )
            )
    return results
