"""Detection accuracy against ground truth: average precision at an IoU threshold.

Used to hold the demo model to its bar through the whole pipeline, and
available to users who want to check a model on their own labelled video.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from vstream.config.loading import format_path
from vstream.errors import VstreamError
from vstream.evaluation_tracks import (
    check_coverage,
    evaluate_line_counts,
    evaluate_tracks,
    has_identities,
    has_tracks,
    select_stream,
)
from vstream.tracking.base import iou_matrix


@dataclass(frozen=True)
class Accuracy:
    """Average precision per class name and their mean."""

    per_class: dict[str, float]
    iou_threshold: float

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.per_class.values()))) if self.per_class else 0.0

    def __str__(self) -> str:
        classes = ", ".join(f"{k} {v:.3f}" for k, v in self.per_class.items())
        return f"mAP@{self.iou_threshold:g} {self.mean:.3f} ({classes})"


def _average_precision(scores: list[float], hits: list[bool], n_truth: int) -> float:
    """Area under the precision envelope of the ranked predictions (all-point)."""
    if n_truth == 0:
        return 0.0
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    tp = np.cumsum(np.asarray(hits, dtype=np.float64)[order])
    fp = np.cumsum(1.0 - np.asarray(hits, dtype=np.float64)[order])
    recall = np.concatenate([[0.0], tp / n_truth, [1.0]])
    precision = np.concatenate([[1.0], tp / np.maximum(tp + fp, 1e-9), [0.0]])
    precision = np.maximum.accumulate(precision[::-1])[::-1]
    steps = np.nonzero(recall[1:] != recall[:-1])[0]
    return float(np.sum((recall[steps + 1] - recall[steps]) * precision[steps + 1]))


def evaluate(
    records: Iterable[Mapping[str, Any]],
    ground_truth: Mapping[str, Any],
    iou_threshold: float = 0.5,
    stream: str | None = None,
) -> Accuracy:
    """Compare frame records (as written to JSON Lines) with ground truth.

    ``ground_truth`` has ``names`` (class names by id) and ``frames``, each
    ``{"frame": i, "boxes": [[x1, y1, x2, y2, class_id], ...]}``. A prediction
    matches the unmatched truth box of its class with the highest IoU at or
    above the threshold, highest scores first. Only the frames the ground truth
    lists are scored, as in :func:`~vstream.evaluation_tracks.evaluate_tracks`: a
    frame it leaves out may be one nobody annotated (a ground truth of every tenth
    frame), so its detections are no false positives; a frame with no objects is
    listed with no boxes. Records of several streams are scored against one
    (``stream``, else the ground truth's ``"stream"``;
    :func:`vstream.evaluation_tracks.select_stream`).
    """
    records = select_stream(records, ground_truth, stream)
    names: list[str] = list(ground_truth["names"])
    truth: dict[int, list[list[float]]] = {f["frame"]: f["boxes"] for f in ground_truth["frames"]}
    detections = {record["frame"]: record["detections"] for record in records}
    scores: dict[int, list[float]] = defaultdict(list)
    hits: dict[int, list[bool]] = defaultdict(list)
    for frame, boxes in truth.items():
        by_class: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for det in detections.get(frame, []):
            by_class[det["class_id"]].append(det)
        for class_id, dets in by_class.items():
            dets.sort(key=lambda d: -d["score"])
            scores[class_id].extend(d["score"] for d in dets)
            gt = [b[:4] for b in boxes if b[4] == class_id]
            hits[class_id].extend(_hits(dets, gt, iou_threshold))
    n_truth: dict[int, int] = defaultdict(int)
    for boxes in truth.values():
        for box in boxes:
            n_truth[int(box[4])] += 1
    per_class = {
        names[c]: _average_precision(scores[c], hits[c], n_truth[c]) for c in sorted(n_truth)
    }
    return Accuracy(per_class=per_class, iou_threshold=iou_threshold)


def _hits(dets: list[dict[str, Any]], gt: list[list[float]], iou_threshold: float) -> list[bool]:
    """Whether each of one frame's predictions of a class (highest score first) matches a
    truth box ``gt`` of that class: the unmatched one with the highest IoU, if at the
    threshold."""
    if not gt:
        return [False] * len(dets)
    ious = iou_matrix(np.array([d["bbox"] for d in dets]), np.array(gt))
    matched = np.zeros(len(gt), dtype=bool)
    hits = []
    for row in range(len(dets)):
        candidates = np.where(matched, -1.0, ious[row])
        best = int(candidates.argmax())
        hit = bool(candidates[best] >= iou_threshold)
        matched[best] |= hit
        hits.append(hit)
    return hits


class _Input(BaseModel):
    """What ``vstream eval`` reads of a file: the keys it uses, each of the JSON type it
    needs (strict: a frame ``"3"`` or ``3.5`` is no frame number); other keys are let be."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


Finite = Annotated[float, Field(allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]


def _not_inverted(bbox: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    """Refuse a predicted ``x1, y1, x2, y2`` box with x2 < x1 or y2 < y1: no run writes one
    (a box in another format, such as x, y, w, h, does). x2 == x1 is let be: ``vstream run``
    writes a box clipped to the frame's edge so, and it matches nothing, as it should."""
    if bbox[2] < bbox[0] or bbox[3] < bbox[1]:
        raise ValueError(f"bbox {list(bbox)} has x2 < x1 or y2 < y1 (x1, y1, x2, y2 expected)")
    return bbox


def _has_area(
    box: tuple[float, float, float, float, int],
) -> tuple[float, float, float, float, int]:
    """Refuse a truth box with x2 <= x1 or y2 <= y1: no prediction can match it, so it would
    count as an object every run misses."""
    if box[2] <= box[0] or box[3] <= box[1]:
        raise ValueError(
            f"box {list(box)} has x2 <= x1 or y2 <= y1 (x1, y1, x2, y2, class_id expected)"
        )
    return box


def _refuse_repeats(values: Sequence[object], where: str, what: str) -> None:
    """Refuse a value that repeats in ``values`` (None is no value), naming both places:
    scored anyway, a repeated frame would drop one of its entries, and a repeated identity
    would count one object or track twice (IDF1 above 1)."""
    first: dict[object, int] = {}
    for i, value in enumerate(values):
        if value is None:
            continue
        if value in first:
            raise ValueError(
                f"{where}[{i}]: {what} {value!r} again ({where}[{first[value]}] has it)"
            )
        first[value] = i


class _Detection(_Input):
    bbox: Annotated[tuple[Finite, Finite, Finite, Finite], AfterValidator(_not_inverted)]
    score: Finite
    class_id: Count
    track_id: int | None = None


class _Event(_Input):
    type: str | None = None
    line: str | None = None
    direction: str | None = None

    @model_validator(mode="after")
    def _crossing(self) -> _Event:
        if self.type == "line_crossing" and (self.line is None or self.direction is None):
            raise ValueError("a line_crossing event names its line and direction")
        return self


class _Record(_Input):
    frame: Count
    stream: str | None = None
    pts: Finite | None = None
    width: Count | None = None
    height: Count | None = None
    detections: list[_Detection]
    events: list[_Event] = []

    @model_validator(mode="after")
    def _one_box_a_track(self) -> _Record:
        _refuse_repeats([d.track_id for d in self.detections], "detections", "track_id")
        return self


class _TruthFrame(_Input):
    frame: Count
    boxes: list[Annotated[tuple[Finite, Finite, Finite, Finite, Count], AfterValidator(_has_area)]]
    ids: list[int | str] | None = None

    @model_validator(mode="after")
    def _one_id_a_box(self) -> _TruthFrame:
        if self.ids is not None and len(self.ids) != len(self.boxes):
            raise ValueError(f"{len(self.ids)} ids for {len(self.boxes)} boxes")
        _refuse_repeats(self.ids or [], "ids", "id")
        return self


class _Crossing(_Input):
    direction: Literal["in", "out"]


class _TruthLine(_Input):
    name: str
    crossings: list[_Crossing]


class _GroundTruth(_Input):
    names: list[str]
    frames: list[_TruthFrame]
    stream: str | None = None
    video: str | None = None
    width: Count | None = None
    height: Count | None = None
    fps: Annotated[Finite, Field(gt=0)] | None = None
    lines: list[_TruthLine] = []

    @model_validator(mode="after")
    def _named_classes(self) -> _GroundTruth:
        with_ids = [frame.ids is not None for frame in self.frames]
        if any(with_ids) and not all(with_ids):
            raise ValueError(
                f"frames[{with_ids.index(False)}]: no ids, where other frames give them"
            )
        for i, frame in enumerate(self.frames):
            for j, box in enumerate(frame.boxes):
                if box[4] >= len(self.names):
                    raise ValueError(
                        f"frames[{i}].boxes[{j}]: class {box[4]}, of {len(self.names)} names"
                    )
        return self

    @model_validator(mode="after")
    def _one_entry_a_frame(self) -> _GroundTruth:
        _refuse_repeats([frame.frame for frame in self.frames], "frames", "frame")
        return self


def _problem(text: str, model: type[_Input]) -> str | None:
    """What is wrong with one JSON document ``text`` read as a ``model``, in one line: the
    first of pydantic's errors as ``where: what`` (``frames[3].boxes[0]: ...``); or None."""
    try:
        model.model_validate_json(text)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = format_path(tuple(error["loc"]))
        message = str(error["msg"]).removeprefix("Value error, ")
        return f"{where}: {message}" if where else message
    return None


def evaluate_files(
    records_path: Path,
    ground_truth_path: Path,
    iou_threshold: float = 0.5,
    stream: str | None = None,
) -> list[str]:
    """What ``vstream eval`` prints, one line each, for a JSON Lines output and a ground truth.

    The detection mAP always; a line on the frames the records miss, and one on
    those the ground truth does not list (not scored), where there are any; MOTA
    and IDF1 when the records carry track ids and the ground truth identities;
    line counts when the ground truth lists crossings. Records of several
    streams are scored against one
    (:func:`~vstream.evaluation_tracks.select_stream`); records of a stream, frames or
    a frame size the ground truth does not have are refused, naming them
    (:func:`~vstream.evaluation_tracks.check_coverage`). Missing or malformed
    files raise :class:`~vstream.errors.VstreamError`, naming the file, the line
    of a record and the key that is wrong.
    """
    for path in (records_path, ground_truth_path):
        if not path.is_file():
            raise VstreamError(f"file not found: {path}")

    records = []
    # "utf-8-sig": a file saved with a byte-order mark (as Notepad does) reads as it looks.
    with records_path.open(encoding="utf-8-sig", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if (why := _problem(line.strip(), _Record)) is not None:
                raise VstreamError(f"cannot evaluate {records_path}: line {number}: {why}")
            records.append(json.loads(line))
    text = ground_truth_path.read_text(encoding="utf-8-sig", errors="replace")
    if (why := _problem(text, _GroundTruth)) is not None:
        raise VstreamError(f"cannot evaluate against {ground_truth_path}: {why}")
    ground_truth = json.loads(text)
    try:
        records = select_stream(records, ground_truth, stream)
        check_coverage(records, ground_truth, stream)
    except ValueError as exc:  # which stream, which frames: said in the message
        raise VstreamError(f"cannot evaluate {records_path}: {exc}") from None
    report = [str(evaluate(records, ground_truth, iou_threshold))]
    report.extend(_coverage_notes(records, ground_truth))
    if has_identities(ground_truth) and has_tracks(records):
        report.append(str(evaluate_tracks(records, ground_truth, iou_threshold)))
    if ground_truth.get("lines"):
        if not any("events" in record for record in records):
            report.append("line counts: the records have no events (run with --line)")
        else:
            report.extend(str(count) for count in evaluate_line_counts(records, ground_truth))
    return report


def _coverage_notes(records: list[Mapping[str, Any]], ground_truth: Mapping[str, Any]) -> list[str]:
    """What the scores leave out, one line each: the ground truth's frames the records do not
    have (their objects count as missed), and the records' frames the ground truth does not
    list (not scored: :func:`evaluate`)."""
    truth_frames = {frame["frame"] for frame in ground_truth["frames"]}
    record_frames = {record["frame"] for record in records}
    notes = []
    if missing := len(truth_frames - record_frames):
        notes.append(
            f"the records have {len(truth_frames) - missing} of the ground truth's "
            f"{len(truth_frames)} frames: the objects of the other {missing} count as missed "
            "(score a run of the whole video)"
        )
    if unlisted := len(record_frames - truth_frames):
        notes.append(
            f"{unlisted} of the records' {len(record_frames)} frames are not in the ground "
            'truth and are not scored (a frame with no objects is listed with "boxes": [])'
        )
    return notes
