"""Host-side results: each frame's detections as columns, records made only at the edge.

The device hands the host one ``(M, 7)`` array per batch (``frame, x1, y1,
x2, y2, score, class_id``; a pose or OBB model's columns follow, and become the
:data:`KEYPOINTS` and :data:`OBB` columns of ``data``). :func:`split_by_frame`
slices its columns per frame into a :class:`Detections`, and the columns travel as they are through
the tracker, the analytics, the annotator and across Ray: no Python object
is made per detected object on the way. Per-object things are made at the
edge, where someone asks for them: JSON records
(:meth:`Detections.records`, :meth:`FrameResult.to_record`) and the light
:class:`Detection` views that iterating a :class:`Detections` yields.

Labels are not a column: a :class:`Detections` holds the model's class names
(one mapping shared by every frame of a detector) and resolves a label only
where one is shown or written (:attr:`Detections.labels`). Extra per-detection
columns go in :attr:`Detections.data`; every selection slices them with the
boxes, so an attribute added later (a secondary classifier's label and score,
an embedding, a flag for boxes the tracker predicted) stays aligned with its
box without any change here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast, overload

import numpy as np

from vstream.frame import Frame

NO_TRACK = -1
"""The :attr:`Detections.tracker_id` of a detection on no confirmed track (or with tracking off)."""

_NO_NAMES: Mapping[int, str] = MappingProxyType({})


def label_for(class_id: int, class_names: Mapping[int, str]) -> str:
    """The name of ``class_id``, or its number where the model gave it no name."""
    return class_names.get(class_id, str(class_id))


def _frozen(array: np.ndarray) -> np.ndarray:
    """``array`` marked read-only: a :class:`Detections` is never written after it is made."""
    array.setflags(write=False)
    return array


def _floats(values: Any) -> np.ndarray:
    array = np.asarray(values)
    return array if array.dtype.kind == "f" else array.astype(np.float64)


def _rounded(values: np.ndarray, digits: int | tuple[int, ...]) -> list[Any]:
    """``values`` (any shape) as nested lists of Python floats, each what ``round(v, d)``
    gives; ``digits`` is one ``d`` for all, or one per position along the last axis (a
    keypoint's x, y to 2 decimals and its score to 4).

    Records round every number they hold, and one ``round`` call per number was most of
    their cost, so numpy rounds (scale by ``10**d``, round half to even, divide: what
    ``np.round`` does). The division gives the float nearest the decimal, as Python's
    ``round`` does; only the choice of the integer can differ, where the scaled product
    is inexact. For float32 and float16 it is exact in float64 (digits up to 12). A float64
    product is within half a unit in its last place: where that leaves it near a half, or
    beyond 2**52, or not finite, the number is rounded by Python instead.
    """
    places = (digits,) if isinstance(digits, int) else digits
    if values.dtype.kind != "f" or min(places) < 0 or max(places) > 12:
        rounded = np.array(_python_rounds(values, digits), dtype=np.float64)
        return cast(list[Any], rounded.reshape(values.shape).tolist())
    scale = 10.0**digits if isinstance(digits, int) else 10.0 ** np.asarray(digits)
    with np.errstate(over="ignore"):  # beyond float64 once scaled: Python's, below
        scaled = values.astype(np.float64) * scale
    out = np.rint(scaled) / scale
    if values.dtype not in (np.float32, np.float16):
        size = np.abs(scaled)
        fraction = np.abs(np.modf(scaled)[0])  # not finite: nan, or 0 with a nan margin
        doubtful = ~(np.abs(fraction - 0.5) > 4 * np.spacing(size)) | ~(size < 2**52)
        if doubtful.any():
            out[doubtful] = _python_rounds(values, digits, doubtful)
    return out.tolist()


def _python_rounds(
    values: np.ndarray, digits: int | tuple[int, ...], where: np.ndarray | None = None
) -> list[Any]:
    """``values`` (those ``where`` selects, when given), flattened, each rounded by Python's
    ``round`` to its place in ``digits`` (as :func:`_rounded` takes them)."""
    each = np.broadcast_to(np.asarray(digits), values.shape)
    if where is not None:
        values, each = values[where], each[where]
    return [
        round(v, d) for v, d in zip(values.ravel().tolist(), each.ravel().tolist(), strict=True)
    ]


def _integers(values: Any, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind in "iub" or array.size == 0:
        return array.astype(np.int64, copy=False)
    raise ValueError(f"Detections: {name} must hold integers, got {array.dtype}")


@dataclass(frozen=True)
class Detection:
    """One detected object, read from a :class:`Detections` (what iterating one yields).

    A view made on demand at the edge, for code that wants one object at a
    time; the data path itself never makes these.
    """

    bbox: tuple[float, float, float, float]
    """``(x1, y1, x2, y2)`` in original frame pixels."""
    score: float
    class_id: int
    label: str
    track_id: int | None = None
    """The confirmed track this detection is on (with tracking on); None otherwise."""
    predicted: bool = False
    """The box is the tracker's prediction on a frame the detector did not see
    (:mod:`vstream.engine.cadence`); the record says ``"predicted": true``."""


PREDICTED = "predicted"
"""The ``data`` column (bool) marking boxes the tracker predicted between detections."""

KEYPOINTS = "keypoints"
"""The ``data`` column (``(N, K, D)`` float32) of a pose model's keypoints: ``x, y`` in frame
pixels, then a score where ``D`` is 3 (:mod:`vstream.postprocess.tasks`)."""

OBB = "obb"
"""The ``data`` column (``(N, 5)`` float32) of an oriented box model: ``cx, cy, w, h`` in frame
pixels and the angle in radians; ``xyxy`` then holds the axis-aligned box around it."""

ATTRIBUTES = "attributes"
"""The ``data`` column (objects) of a cascade's readings (:mod:`vstream.cascade.stage`): per
detection, ``{model name: {"label", "score", "fresh"}}`` as records write it, or None."""


MASKS = "mask"
"""The ``data`` column (objects) of a segmentation model's masks: per detection a
:class:`vstream.postprocess.masks.Mask` (its window's bits), which records write as
``area`` and ``mask`` (COCO RLE) or ``polygon``, per ``postprocess.mask_format``."""


class Detections:
    """The detections of one frame, as columns of equal length ``N``.

    - ``xyxy``: ``(N, 4)`` float32 or float64, ``x1, y1, x2, y2`` in pixels of
      the original frame;
    - ``confidence``: ``(N,)`` floats;
    - ``class_id``: ``(N,)`` int64;
    - ``tracker_id``: ``(N,)`` int64, the confirmed track of each detection or
      :data:`NO_TRACK` (all of them when not given: tracking off);
    - ``class_names``: the model's names by class id, shared, not copied; a
      class without a name is labelled with its number;
    - ``data``: extra per-detection columns by name, each with its ``N`` rows
      first (``(N,)`` scores, ``(N, D)`` embeddings...), read-only.

    ``dets[mask]``, ``dets[indices]`` and ``dets[a:b]`` select rows of every
    column (``data`` included) into a new :class:`Detections`; ``dets[i]`` and
    iteration give :class:`Detection` views. The arrays are taken as given
    (floats kept at their precision, no copy where the type already fits) and
    marked read-only, and the attributes cannot be reassigned: pass arrays
    nobody writes afterwards. Shapes that do not agree raise ``ValueError``
    naming every column's shape.

    :meth:`records` writes the fixed columns, ``"predicted": true`` for
    the rows the :data:`PREDICTED` column marks, ``"attributes"`` where the
    :data:`ATTRIBUTES` column (a cascade's readings) has a value, and ``"area"``
    with ``"mask"`` or ``"polygon"`` where the :data:`MASKS` column has one; another
    ``data`` column reaches the records when the feature that adds it decides
    its keys.
    """

    __slots__ = ("class_id", "class_names", "confidence", "data", "tracker_id", "xyxy")

    xyxy: np.ndarray
    confidence: np.ndarray
    class_id: np.ndarray
    tracker_id: np.ndarray
    class_names: Mapping[int, str]
    data: Mapping[str, np.ndarray]

    def __init__(
        self,
        xyxy: Any,
        confidence: Any,
        class_id: Any,
        tracker_id: Any = None,
        *,
        class_names: Mapping[int, str] = _NO_NAMES,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        boxes = _floats(xyxy)
        if boxes.size == 0:
            boxes = boxes.reshape(0, 4)
        count = len(boxes) if boxes.ndim else 0
        columns = {
            "confidence": _floats(confidence),
            "class_id": _integers(class_id, "class_id"),
            "tracker_id": (
                np.full(count, NO_TRACK, dtype=np.int64)
                if tracker_id is None
                else _integers(tracker_id, "tracker_id")
            ),
        }
        columns = {k: v.reshape(0) if v.size == 0 else v for k, v in columns.items()}
        extra = {str(k): np.asarray(v) for k, v in (data or {}).items()}
        if (
            boxes.ndim != 2
            or boxes.shape[1] != 4
            or any(c.ndim != 1 or len(c) != count for c in columns.values())
            or any(v.ndim == 0 or len(v) != count for v in extra.values())
        ):
            shapes = ", ".join(
                f"{name} {tuple(array.shape)}"
                for name, array in {"xyxy": boxes, **columns, **extra}.items()
            )
            raise ValueError(
                f"Detections: {shapes}; expected xyxy (N, 4) and N rows in every column"
            )
        set_ = object.__setattr__
        set_(self, "xyxy", _frozen(boxes))
        for name, column in columns.items():
            set_(self, name, _frozen(column))
        set_(self, "class_names", class_names)
        set_(self, "data", MappingProxyType({k: _frozen(v) for k, v in extra.items()}))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Detections are immutable: cannot set {name!r}")

    def __repr__(self) -> str:
        extra = f", data={sorted(self.data)}" if self.data else ""
        return f"Detections({len(self)} boxes{extra})"

    @classmethod
    def empty(cls, class_names: Mapping[int, str] = _NO_NAMES) -> Detections:
        """No detections (a frame where nothing was found)."""
        return cls(
            np.zeros((0, 4), np.float32),
            np.zeros(0, np.float32),
            np.zeros(0, np.int64),
            class_names=class_names,
        )

    @classmethod
    def from_detections(cls, detections: Sequence[Detection]) -> Detections:
        """Columns from per-object :class:`Detection` values (the inverse of iterating).

        For code that makes its own results one object at a time (tests,
        synthetic workloads); the class names are taken from the labels, so
        one class id must keep one label.
        """
        names: dict[int, str] = {}
        for d in detections:
            if names.setdefault(d.class_id, d.label) != d.label:
                raise ValueError(
                    f"class {d.class_id} labelled both {names[d.class_id]!r} and {d.label!r}"
                )
        if not detections:
            return cls.empty()
        return cls(
            [d.bbox for d in detections],
            [d.score for d in detections],
            [d.class_id for d in detections],
            [NO_TRACK if d.track_id is None else d.track_id for d in detections],
            class_names=names,
            data={PREDICTED: [d.predicted for d in detections]}
            if any(d.predicted for d in detections)
            else None,
        )

    def __len__(self) -> int:
        return len(self.confidence)

    @overload
    def __getitem__(self, index: int | np.integer) -> Detection: ...

    @overload
    def __getitem__(self, index: slice | np.ndarray | Sequence[int]) -> Detections: ...

    def __getitem__(
        self, index: int | np.integer | slice | np.ndarray | Sequence[int]
    ) -> Detection | Detections:
        """A :class:`Detection` for an int; a :class:`Detections` for a mask, indices or slice."""
        if isinstance(index, (int, np.integer)):
            return self._view(int(index))
        rows = index if isinstance(index, slice) else np.asarray(index)
        if isinstance(rows, np.ndarray) and (rows.ndim != 1 or rows.dtype.kind not in "biu"):
            if rows.size:  # anything but rows: the constructor names the shapes it made
                return Detections(
                    self.xyxy[index],
                    self.confidence[index],
                    self.class_id[index],
                    self.tracker_id[index],
                    class_names=self.class_names,
                    data={k: v[index] for k, v in self.data.items()},
                )
            rows = rows.astype(np.intp).reshape(0)  # [] is float to numpy: no rows
        return self._aligned(
            self.xyxy[rows],
            self.confidence[rows],
            self.class_id[rows],
            self.tracker_id[rows],
            self.class_names,
            {k: v[rows] for k, v in self.data.items()},
        )

    def with_columns(
        self, *, tracker_id: Any = None, data: Mapping[str, Any] | None = None
    ) -> Detections:
        """These detections with ``tracker_id`` replaced and ``data`` columns added or replaced
        (what the tracker and the cascade attach); the other columns shared, not copied."""
        ids = self.tracker_id if tracker_id is None else _integers(tracker_id, "tracker_id")
        added = {str(k): np.asarray(v) for k, v in (data or {}).items()}
        count = len(self)
        if ids.shape != (count,) or any(v.ndim == 0 or len(v) != count for v in added.values()):
            return Detections(  # the constructor names the columns that disagree
                self.xyxy,
                self.confidence,
                self.class_id,
                ids,
                class_names=self.class_names,
                data={**self.data, **added},
            )
        return self._aligned(
            self.xyxy, self.confidence, self.class_id, ids, self.class_names, {**self.data, **added}
        )

    @classmethod
    def _aligned(
        cls,
        xyxy: np.ndarray,
        confidence: np.ndarray,
        class_id: np.ndarray,
        tracker_id: np.ndarray,
        class_names: Mapping[int, str],
        data: Mapping[str, np.ndarray],
    ) -> Detections:
        """Columns known to be aligned and of the right kinds (rows of, or columns checked
        for, a :class:`Detections`), made without the constructor's checks, which were
        a third of the cost of delivering a frame's records; read-only as ever."""
        made = object.__new__(cls)
        set_ = object.__setattr__
        set_(made, "xyxy", _frozen(xyxy))
        set_(made, "confidence", _frozen(confidence))
        set_(made, "class_id", _frozen(class_id))
        set_(made, "tracker_id", _frozen(tracker_id))
        set_(made, "class_names", class_names)
        set_(made, "data", MappingProxyType({k: _frozen(v) for k, v in data.items()}))
        return made

    def __iter__(self) -> Iterator[Detection]:
        return (self._view(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Detections):
            return NotImplemented
        return (
            all(
                np.array_equal(a, b)
                for a, b in (
                    (self.xyxy, other.xyxy),
                    (self.confidence, other.confidence),
                    (self.class_id, other.class_id),
                    (self.tracker_id, other.tracker_id),
                )
            )
            and self.labels == other.labels
            and self.data.keys() == other.data.keys()
            and all(np.array_equal(v, other.data[k]) for k, v in self.data.items())
        )

    __hash__ = None  # type: ignore[assignment]  # equal by value, and arrays are not hashable

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (across Ray) with only the names of the classes present; read-only again,
        its columns aligned as they were when pickled."""
        names = {
            c: self.class_names[c] for c in set(self.class_id.tolist()) if c in self.class_names
        }
        return (
            Detections._aligned,
            (self.xyxy, self.confidence, self.class_id, self.tracker_id, names, dict(self.data)),
        )

    @property
    def tracked(self) -> np.ndarray:
        """``(N,)`` bool: which detections are on a confirmed track."""
        return self.tracker_id != NO_TRACK

    @property
    def labels(self) -> list[str]:
        """Each detection's class name, resolved now (labels are not kept as a column)."""
        ids = self.class_id.tolist()
        names = {c: label_for(c, self.class_names) for c in set(ids)}  # once a class
        return [names[c] for c in ids]

    def records(self) -> list[dict[str, Any]]:
        """The detections as JSON records: ``bbox`` (2 decimals), ``score`` (4), ``class_id``,
        ``label``, and ``track_id`` only for detections on a track."""
        records: list[dict[str, Any]] = []
        predicted = self.data.get(PREDICTED)
        flags = predicted.tolist() if predicted is not None else [False] * len(self)
        read = self.data.get(ATTRIBUTES)
        attributes = read.tolist() if read is not None else [None] * len(self)
        shapes = _shape_records(self.data, len(self)) or itertools.repeat(None, len(self))
        made = self.data.get(MASKS)
        masks = made.tolist() if made is not None else [None] * len(self)
        for box, score, class_id, label, track_id, flag, attribute, shape, mask in zip(
            _rounded(self.xyxy, 2),
            _rounded(self.confidence, 4),
            self.class_id.tolist(),
            self.labels,
            self.tracker_id.tolist(),
            flags,
            attributes,
            shapes,
            masks,
            strict=True,
        ):
            record: dict[str, Any] = {
                "bbox": box,
                "score": score,
                "class_id": class_id,
                "label": label,
            }
            if track_id != NO_TRACK:
                record["track_id"] = track_id
            if flag:
                record["predicted"] = True
            if attribute:
                record["attributes"] = attribute
            if shape is not None:
                record.update(shape)
            if mask is not None:
                record.update(mask.record())
            records.append(record)
        return records

    def _view(self, index: int) -> Detection:
        track_id = int(self.tracker_id[index])
        class_id = int(self.class_id[index])
        x1, y1, x2, y2 = self.xyxy[index].tolist()
        return Detection(
            (x1, y1, x2, y2),
            float(self.confidence[index]),
            class_id,
            label_for(class_id, self.class_names),
            None if track_id == NO_TRACK else track_id,
            PREDICTED in self.data and bool(self.data[PREDICTED][index]),
        )


def _shape_records(data: Mapping[str, np.ndarray], count: int) -> list[dict[str, Any]] | None:
    """Per detection, what a pose or OBB model added, as records write it: ``keypoints``
    (``[[x, y, score], ...]``, pixels to 2 decimals, scores to 4), ``obb`` (``[cx, cy, w, h,
    angle]``, the angle in radians to 4 decimals) and its four ``corners``; None where the
    model added neither."""
    if KEYPOINTS not in data and OBB not in data:
        return None
    shapes: list[dict[str, Any]] = [{} for _ in range(count)]
    keypoints = data.get(KEYPOINTS)
    if keypoints is not None:
        digits = (2, 2, *[4] * (keypoints.shape[-1] - 2))  # pixels, then the scores
        for shape, points in zip(shapes, _rounded(keypoints, digits), strict=True):
            shape[KEYPOINTS] = points
    rotated = data.get(OBB)
    if rotated is not None:
        corners = _rounded(rotated_corners(rotated.astype(np.float64)), 2)
        values = _rounded(rotated, (2, 2, 2, 2, 4))  # the angle in radians to 4 decimals
        for shape, box, points in zip(shapes, values, corners, strict=True):
            shape[OBB] = box
            shape["corners"] = points
    return shapes


def rotated_corners(rotated: np.ndarray) -> np.ndarray:
    """``(N, 4, 2)`` corners of ``(N, 5)`` ``cx, cy, w, h, angle`` rows, in order around the
    box; the angle turns the box's ``w`` side from the x axis towards y (down the picture)."""
    rotated = np.asarray(rotated, dtype=np.float64).reshape(-1, 5)
    cos, sin = np.cos(rotated[:, 4]), np.sin(rotated[:, 4])
    along_w = np.stack([cos, sin], axis=1) * rotated[:, 2:3] / 2
    along_h = np.stack([-sin, cos], axis=1) * rotated[:, 3:4] / 2
    signs = np.array([[1, 1], [1, -1], [-1, -1], [-1, 1]], dtype=np.float64)
    return (
        rotated[:, None, 0:2]
        + signs[None, :, 0:1] * along_w[:, None, :]
        + signs[None, :, 1:2] * along_h[:, None, :]
    )


@dataclass(frozen=True)
class FrameResult:
    """All detections of one frame, with the frame's identity and size."""

    stream_id: str
    frame_index: int
    pts_seconds: float
    width: int
    height: int
    detections: Detections = field(default_factory=Detections.empty)
    events: tuple[dict[str, Any], ...] | None = None
    """Line crossings, zone entries and exits, loitering; None where analytics are off."""
    line_counts: dict[str, dict[str, int]] | None = None
    """Running count per line and direction (``{"gate": {"in": 3, "out": 1}}``)."""
    zone_occupancy: dict[str, int] | None = None
    """Tracks inside each zone in this frame."""

    def to_record(self) -> dict[str, Any]:
        """The JSON Lines record of this frame (analytics keys only where analytics run)."""
        record: dict[str, Any] = {
            "stream": self.stream_id,
            "frame": self.frame_index,
            "pts": round(self.pts_seconds, 6),
            "width": self.width,
            "height": self.height,
            "detections": self.detections.records(),
        }
        if self.events is not None:
            record["events"] = list(self.events)
        if self.line_counts is not None:
            record["lines"] = self.line_counts
        if self.zone_occupancy is not None:
            record["zones"] = self.zone_occupancy
        return record


def split_by_frame(
    detections: np.ndarray,
    frames: Sequence[Frame],
    class_names: Mapping[int, str],
    keypoints: tuple[int, int] | None = None,
    obb: bool = False,
) -> list[FrameResult]:
    """Each frame's result from a batch's host detections (rows of ``frame, x1, y1, x2, y2,
    score, class_id``, then a pose model's ``K x D`` keypoint values (``keypoints`` gives
    ``(K, D)``) or an OBB model's ``cx, cy, w, h, angle`` (``obb``)).

    ``detections`` may be a staging buffer the next batch overwrites: the
    columns are copied out once, ordered by frame (stably: each frame keeps
    the device's order), and each frame gets views of its rows.
    """
    extra = keypoints[0] * keypoints[1] if keypoints is not None else 5 if obb else 0
    rows = _floats(detections).reshape(-1, 7 + extra)
    order = np.argsort(rows[:, 0], kind="stable")
    ordered = rows[order]  # a copy, ordered by frame
    xyxy = np.ascontiguousarray(ordered[:, 1:5])
    confidence = np.ascontiguousarray(ordered[:, 5])
    class_id = ordered[:, 6].astype(np.int64)
    columns: dict[str, np.ndarray] = {}
    if keypoints is not None:
        columns[KEYPOINTS] = np.ascontiguousarray(ordered[:, 7:]).reshape(-1, *keypoints)
    if obb:
        columns[OBB] = np.ascontiguousarray(ordered[:, 7:])
    untracked = np.full(len(ordered), NO_TRACK, dtype=np.int64)
    bounds = np.searchsorted(ordered[:, 0], np.arange(len(frames) + 1), side="left").tolist()
    # Each frame's rows of columns made aligned just above: no constructor's checks per frame.
    return [
        FrameResult(
            f.stream_id,
            f.index,
            f.pts_seconds,
            f.width,
            f.height,
            Detections._aligned(
                xyxy[start:end],
                confidence[start:end],
                class_id[start:end],
                untracked[start:end],
                class_names,
                {name: column[start:end] for name, column in columns.items()},
            ),
        )
        for f, start, end in zip(frames, bounds[:-1], bounds[1:], strict=True)
    ]
