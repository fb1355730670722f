"""The detector families vstream decodes, and how each is recognised from the model itself.

A family fixes three things: how its outputs are read (which tensor holds
boxes, scores, classes; box layout; pixels or normalised; NMS or not), how
its input is made (letterbox or stretch, value range, mean and std) and any
extra input it takes. :func:`recognise` picks the family from the output
names and shapes, the input size and the metadata, and says why in words,
so ``vstream info`` can show a wrong guess; ``model.format`` overrides it.

Shapes alone cannot tell some families apart, so the input size is used:
at an input of ``H x W`` a dense head over strides 8, 16 and 32 has
``G = sum(H/s * W/s)`` cells. YOLOX (anchor-free) and YOLO-NAS have ``G``
rows, YOLOv5 (three anchors a cell) ``3 G``; DETR-like models have a fixed
number of queries (300 in most exports), which is neither. A single
``[B, Q, 4 + nc]`` output is RT-DETR only where the metadata says so
(Ultralytics writes its ``description`` and ``head``); without, it is read as
YOLOv5, as before, unless there are ``nc`` class names: then no objectness column
fits, and it is refused as a YOLOv8 output transposed (or an RT-DETR without its
metadata).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from vstream.config.model import (  # defined with the options, read here
    DetrScores,
    OutputFormat,
    ResizeMode,
)
from vstream.errors import ModelError

END_TO_END_MAX_DETECTIONS = 1000
"""An ``[B, K, 6]`` output with at most this many rows is read as end-to-end (dense heads
have thousands of rows), unless K is a dense head's G or 3 G at the input size: a one-class
YOLOX or YOLOv5 at a small input."""

RTDETR_TOPK_FROM = (8, 4)
"""The first Ultralytics release whose RT-DETR export writes top-k rows ``[B, K, 6]``."""

STRIDES = (8, 16, 32)
"""Strides of the dense heads (YOLOv5, YOLOX, YOLO-NAS) whose row count identifies them."""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Preprocessing:
    """How a family's input is made: ``value = (pixel * input_range - mean) / std``."""

    resize_mode: ResizeMode = "letterbox"
    input_range: Literal[1, 255] = 1
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)

    def describe(self) -> str:
        text = f"{self.resize_mode}, values 0..{self.input_range}"
        if self.mean != (0.0, 0.0, 0.0) or self.std != (1.0, 1.0, 1.0):
            text += f", mean {list(self.mean)}, std {list(self.std)}"
        return text

    def normalisation(self) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """(offset, divisor) per channel for pixels in 0..1, or None where values stay 0..1."""
        offset = tuple(m / self.input_range for m in self.mean)
        divisor = tuple(s / self.input_range for s in self.std)
        return None if offset == (0.0,) * 3 and divisor == (1.0,) * 3 else (offset, divisor)


PREPROCESSING_FIELDS = ("resize_mode", "input_range", "mean", "std")
"""The parts of :class:`Preprocessing` that each come from the first source that sets them."""


def resolve_preprocessing(
    family: Preprocessing,
    channels: Mapping[str, tuple[float, float, float]],
    config: Mapping[str, object],
    files: Sequence[tuple[str, Mapping[str, object]]] = (),
) -> tuple[Preprocessing, tuple[str, ...]]:
    """The preprocessing to run, each part from the first that sets it: the ``config`` (the
    model config's values, None where unset), the model metadata's ``channels`` (``mean``,
    ``std``), the ``files`` beside the model (name, values), the family; with where each
    part came from, one line each, for ``vstream info``."""
    layers = [("the config", config), ("the model metadata", channels), *files]
    chosen: dict[str, object] = {}
    reasons = []
    for name in PREPROCESSING_FIELDS:
        found = next(((src, v[name]) for src, v in layers if v.get(name) is not None), None)
        source, value = found or ("", getattr(family, name))
        if name in ("mean", "std"):
            value = tuple(float(v) for v in value)  # type: ignore[attr-defined]
        chosen[name] = value
        shown = list(value) if isinstance(value, tuple) else value
        reasons.append(f"{name} {shown} " + (f"from {source}" if found else "the family's default"))
    return Preprocessing(**chosen), tuple(reasons)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Family:
    """What vstream knows of one output format: its models, boxes and preprocessing."""

    models: str
    """Who exports it, for people reading ``vstream info``."""
    box: Literal["cxcywh", "xyxy"]
    normalised: bool
    """Boxes as fractions of the input size rather than input pixels."""
    nms: bool
    """Whether vstream runs NMS (False: the model's queries or its own NMS are final)."""
    preprocessing: Preprocessing = field(default_factory=Preprocessing)
    outputs: int = 1


FAMILIES: dict[OutputFormat, Family] = {
    OutputFormat.YOLOV8: Family("Ultralytics YOLOv8, YOLO11, YOLO26", "cxcywh", False, True),
    OutputFormat.YOLOV5: Family("YOLOv5, YOLOv7", "cxcywh", False, True),
    OutputFormat.YOLOX: Family(
        "YOLOX (raw grids)", "cxcywh", False, True, Preprocessing(input_range=255)
    ),
    OutputFormat.END_TO_END: Family("Ultralytics YOLOv10, YOLO26", "xyxy", False, False),
    OutputFormat.RTDETR: Family(
        "Ultralytics RT-DETR", "cxcywh", True, False, Preprocessing(resize_mode="stretch")
    ),
    OutputFormat.RTDETR_TOPK: Family(
        "Ultralytics RT-DETR (8.4+)", "cxcywh", True, False, Preprocessing(resize_mode="stretch")
    ),
    OutputFormat.DETR: Family(
        "RF-DETR, D-FINE, DEIM; transformers' DETR, RT-DETR, D-FINE (boxes + logits)",
        "cxcywh",
        True,
        False,
        Preprocessing("stretch", 1, IMAGENET_MEAN, IMAGENET_STD),
        outputs=2,
    ),
    OutputFormat.DETR_SIZED: Family(
        "RT-DETR (lyuwenyu/PaddleDetection), D-FINE, DEIM (labels, boxes, scores)",
        "xyxy",
        False,
        False,
        Preprocessing(resize_mode="stretch"),
        outputs=3,
    ),
    OutputFormat.YOLO_NAS: Family("YOLO-NAS", "xyxy", False, True, outputs=2),
}

KNOWN_LAYOUTS = (
    "yolov8 [B, 4+nc, N]; yolov5 [B, 3G, 5+nc]; yolox [B, G, 5+nc]; end2end [B, K, 6]; "
    "rtdetr [B, Q, 4+nc]; rtdetr_topk [B, K, 6]; detr boxes [B, Q, 4] + logits [B, Q, nc]; "
    "detr_sized labels [B, K] + boxes [B, K, 4] + scores [B, K]; "
    "yolo_nas boxes [B, G, 4] + scores [B, G, nc]"
)

TRANSPOSED_YOLOV8 = (
    "a YOLOv8 output transposed to [B, N, 4+nc] (anchors before channels), which vstream "
    "does not read: export it as Ultralytics does, [B, 4+nc, N]"
)
"""Why an output with more rows than columns and ``4 + nc`` columns is refused: read as
YOLOv8 it would be transposed once more (nothing found), read as YOLOv5 or YOLOX its first
class would be taken for objectness."""


@dataclass(frozen=True)
class OutputInfo:
    """An output as recognition sees it: its name and resolved shape."""

    name: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Recognition:
    """The family chosen, which output plays which part, and the reasons, in words."""

    format: OutputFormat
    order: tuple[int, ...]
    """Model output positions in the order the decoder takes them (see :func:`decode_order`)."""
    reasons: tuple[str, ...]
    no_object: bool = False
    """``detr`` only: the logits end with DETR's "no object" class, so scores are their
    softmax without it (one class per query); else a sigmoid per class, top-k over queries
    x classes."""


def grid_cells(input_size: tuple[int, int]) -> int:
    """Cells of a dense head over :data:`STRIDES` at ``(height, width)``."""
    return sum((input_size[0] // s) * (input_size[1] // s) for s in STRIDES)


def _shapes(outputs: Sequence[OutputInfo]) -> str:
    return ", ".join(f"{o.name} {list(o.shape)}" for o in outputs)


def _unknown(outputs: Sequence[OutputInfo], why: str) -> ModelError:
    return ModelError(
        f"cannot tell the detector output format ({why}) from outputs {_shapes(outputs)}: "
        f"known layouts: {KNOWN_LAYOUTS}; set model.format (--format) if it is one of them"
    )


def _metadata_family(metadata: Mapping[str, str]) -> tuple[OutputFormat | None, str]:
    """A family the metadata names (Ultralytics' ``description``, ``end2end``), if any."""
    description = metadata.get("description", "").strip()
    head = metadata.get("head", "")
    if head == "RTDETRDecoder":
        return OutputFormat.RTDETR, "metadata head=RTDETRDecoder"
    if "rtdetr" in description.lower().replace("-", ""):
        return OutputFormat.RTDETR, f"metadata description {description!r} names RT-DETR"
    if metadata.get("end2end", "").lower() == "true":
        return OutputFormat.END_TO_END, "metadata end2end=True (NMS inside the model)"
    return None, ""


def _ultralytics_version(metadata: Mapping[str, str]) -> tuple[int, int] | None:
    """(major, minor) of the Ultralytics release that exported the model (its ``version``)."""
    parts = metadata.get("version", "").strip().split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1])
    return None


def _rtdetr_layout(
    rows: int, cols: int, metadata: Mapping[str, str], class_names: int
) -> tuple[OutputFormat, str]:
    """Which of Ultralytics' two RT-DETR outputs ``[B, rows, cols]`` is, and why.

    Up to 8.3 it is every query's class scores (``4 + nc`` columns); from 8.4 the
    top-k rows ``cx cy w h score class`` (6 columns). Six columns are both for two
    classes, so the metadata decides: the release, else ``end2end``, else the
    number of class names. Where none of them tells, guessing would read a class
    column as a score (every box at 1.0), so the model is refused.
    """
    if cols != 6:
        return OutputFormat.RTDETR, f"output [B, {rows} queries, 4+{cols - 4}]"
    version = _ultralytics_version(metadata)
    if version is not None:
        topk = version >= RTDETR_TOPK_FROM
        return (OutputFormat.RTDETR_TOPK if topk else OutputFormat.RTDETR), (
            f"output [B, {rows}, 6] exported by Ultralytics {metadata['version'].strip()}: "
            + ("top-k cx cy w h score class rows (from 8.4)" if topk else "4+2 class scores")
        )
    if metadata.get("end2end", "").lower() == "true":
        return OutputFormat.RTDETR_TOPK, f"output [B, {rows}, 6], metadata end2end=True: top-k rows"
    if class_names not in (0, 2):
        return OutputFormat.RTDETR_TOPK, (
            f"output [B, {rows}, 6] with {class_names} class names (not 4+nc): top-k rows"
        )
    raise ModelError(
        f"an Ultralytics RT-DETR output [B, {rows}, 6] is two classes' scores (to 8.3) or "
        f"top-k rows (from 8.4), and the metadata has no version to tell which: "
        "set --format rtdetr or --format rtdetr_topk (model.format)"
    )


def _one_output(
    out: OutputInfo, input_size: tuple[int, int], metadata: Mapping[str, str], class_names: int
) -> tuple[OutputFormat, str]:
    if len(out.shape) != 3:
        raise _unknown([out], "a single output must have 3 dimensions")
    _, rows, cols = out.shape
    cells = grid_cells(input_size)
    named, why = _metadata_family(metadata)
    if named is OutputFormat.RTDETR and cols > 4:
        fmt, layout = _rtdetr_layout(rows, cols, metadata, class_names)
        return fmt, f"{why}; {layout}"
    if named is OutputFormat.END_TO_END and cols == 6:
        return named, why + f"; output [B, {rows}, 6]"
    if cols == 6 and rows <= END_TO_END_MAX_DETECTIONS and rows not in (cells, 3 * cells):
        return OutputFormat.END_TO_END, f"output [B, {rows}, 6]: x1 y1 x2 y2 score class rows"
    if 5 <= rows <= cols:
        return OutputFormat.YOLOV8, f"output [B, 4+{rows - 4}, {cols}]: channels before anchors"
    if class_names and cols - 4 == class_names:
        raise ModelError(
            f"output {out.name} {list(out.shape)} holds 4+{class_names} values per row for "
            f"{class_names} class names, no objectness: {TRANSPOSED_YOLOV8}; or RT-DETR "
            "queries without metadata naming RT-DETR (--format rtdetr)"
        )
    if cols >= 6 and rows == 3 * cells:
        return OutputFormat.YOLOV5, (
            f"output [B, {rows}, 5+{cols - 5}]: {rows} rows = 3 anchors x {cells} cells at "
            f"{input_size[1]}x{input_size[0]} (strides 8/16/32)"
        )
    if cols >= 6 and rows == cells:
        return OutputFormat.YOLOX, (
            f"output [B, {rows}, 5+{cols - 5}]: {rows} rows = one per cell at "
            f"{input_size[1]}x{input_size[0]} (anchor-free, strides 8/16/32): YOLOX raw grids "
            "(an export with --decode_in_inference has the same shape: --format yolov5)"
        )
    if cols >= 6 and rows > cols:
        return OutputFormat.YOLOV5, (
            f"output [B, {rows}, 5+{cols - 5}]: rows after channels, no metadata naming "
            "RT-DETR (whose [B, Q, 4+nc] looks the same: --format rtdetr)"
        )
    raise _unknown([out], "no rule matches its shape")


def _named(outputs: Sequence[OutputInfo], *words: str) -> int | None:
    """Position of the output whose name contains one of ``words`` (lower case)."""
    for position, out in enumerate(outputs):
        if any(word in out.name.lower() for word in words):
            return position
    return None


def _several_outputs(
    outputs: Sequence[OutputInfo], input_size: tuple[int, int], extra_inputs: Sequence[str]
) -> Recognition:
    ranks = [len(o.shape) for o in outputs]
    if len(outputs) == 3 and sorted(ranks) == [2, 2, 3]:
        boxes = ranks.index(3)
        labels = _named(outputs, "label")
        scores = _named(outputs, "score")
        if labels is None or scores is None or len({boxes, labels, scores}) != 3:
            raise _unknown(outputs, "three outputs, but no 'labels' and 'scores' among them")
        sized = f"; extra input {', '.join(extra_inputs)} bound once" if extra_inputs else ""
        return Recognition(
            OutputFormat.DETR_SIZED,
            (labels, boxes, scores),
            (
                f"three outputs {outputs[labels].name!r} [B, K], {outputs[boxes].name!r} "
                f"[B, K, 4], {outputs[scores].name!r} [B, K]: labels, xyxy boxes, scores{sized}",
            ),
        )
    if len(outputs) == 2 and ranks == [3, 3]:
        four = [i for i, o in enumerate(outputs) if o.shape[2] == 4]
        if not four or outputs[0].shape[1] != outputs[1].shape[1]:
            raise _unknown(outputs, "two outputs, but not boxes [B, N, 4] and scores [B, N, nc]")
        named = _named(outputs, "box", "det")  # RF-DETR: dets; D-FINE: pred_boxes
        boxes = named if named in four else four[0]
        scores = 1 - boxes
        rows = outputs[boxes].shape[1]
        cells = grid_cells(input_size)
        pair = f"{outputs[boxes].name!r} [B, {rows}, 4] + {outputs[scores].name!r} [B, {rows}, nc]"
        if rows == cells or _named(outputs, "pre_nms") is not None:
            why = (
                f"{rows} rows = one per cell (strides 8/16/32)"
                if rows == cells
                else "'pre_nms' output names (super-gradients' export)"
            )
            return Recognition(
                OutputFormat.YOLO_NAS, (boxes, scores), (f"two outputs {pair}: {why}: YOLO-NAS",)
            )
        return Recognition(
            OutputFormat.DETR,
            (boxes, scores),
            (f"two outputs {pair}: {rows} rows is no dense head's cell count: DETR queries",),
        )
    raise _unknown(outputs, f"{len(outputs)} outputs")


def recognise(
    outputs: Sequence[OutputInfo],
    input_size: tuple[int, int],
    metadata: Mapping[str, str] | None = None,
    extra_inputs: Sequence[str] = (),
    forced: OutputFormat | None = None,
    class_names: int = 0,
    scores: DetrScores | None = None,
) -> Recognition:
    """The family of a model with these outputs at ``input_size`` ``(height, width)``.

    ``forced`` (``model.format``) skips the guess but still checks the shapes fit;
    ``class_names`` is how many the config or the model names (0: none); ``scores``
    (``model.scores``) says how a ``detr``'s logits become scores, else the layout does
    (:func:`detr_scores`).
    """
    found = _recognise(outputs, input_size, metadata or {}, extra_inputs, forced, class_names)
    if found.format is OutputFormat.DETR:
        return detr_scores(found, outputs[found.order[1]], class_names, scores)
    if scores is not None:
        raise ModelError(
            f"model.scores ({scores}) is for the detr format; this model is {found.format.value}"
        )
    return found


def detr_scores(
    found: Recognition, logits: OutputInfo, class_names: int, scores: DetrScores | None
) -> Recognition:
    """``found`` with its score rule: ``scores`` where given, else softmax where the output
    is transformers' ``logits`` and holds one column more than the class names (DETR's
    "no object"), else sigmoid.

    The name is required too: RF-DETR and D-FINE trained on N classes often carry N + 1
    sigmoid columns (``labels``, ``pred_logits``), which a softmax would flatten.
    """
    width = logits.shape[-1]
    if scores is not None:
        why = f"model.scores is {scores}"
    elif logits.name == "logits" and class_names and width == class_names + 1:
        scores = "softmax"
        why = (
            f"'logits' holds {width} columns for {class_names} class names: the last is "
            "DETR's no-object class"
        )
    else:
        scores = "sigmoid"
        why = f"{width} class columns for {class_names or 'no'} class names"
    rule = (
        "softmax, no-object class dropped: one class per query"
        if scores == "softmax"
        else "sigmoid, the best of queries x classes"
    )
    if scores == "softmax" and width < 2:
        raise ModelError(
            f"softmax scores need a class and the no-object class; {logits.name!r} "
            f"has {width} column"
        )
    return Recognition(
        found.format, found.order, (*found.reasons, f"scores: {rule} ({why})"), scores == "softmax"
    )


def _recognise(
    outputs: Sequence[OutputInfo],
    input_size: tuple[int, int],
    metadata: Mapping[str, str],
    extra_inputs: Sequence[str],
    forced: OutputFormat | None,
    class_names: int,
) -> Recognition:
    """The family alone, as :func:`recognise` finds it."""
    if forced is not None and FAMILIES[forced].outputs == 1:
        check_output_shape(forced, outputs[0].shape)
        _, rows, cols = outputs[0].shape
        if forced is OutputFormat.YOLOV8 and rows > cols:
            raise ModelError(
                f"output {_shapes(outputs)} does not fit the yolov8 format [B, 4+nc, N]: more "
                f"rows ({rows}) than columns ({cols}), as in {TRANSPOSED_YOLOV8}"
            )
        return Recognition(forced, (0,), (f"model.format is {forced.value}",))
    if forced is not None:
        found = _several_outputs(outputs, input_size, extra_inputs) if len(outputs) > 1 else None
        if found is None or FAMILIES[found.format].outputs != FAMILIES[forced].outputs:
            raise ModelError(f"outputs {_shapes(outputs)} do not fit the {forced.value} format")
        return Recognition(forced, found.order, (f"model.format is {forced.value}",))
    if len(outputs) == 1:
        fmt, why = _one_output(outputs[0], input_size, metadata, class_names)
        return Recognition(fmt, (0,), (why,))
    return _several_outputs(outputs, input_size, extra_inputs)


def class_count(
    fmt: OutputFormat, shapes: Sequence[tuple[int, ...]], no_object: bool = False
) -> int | None:
    """Number of classes the outputs carry (in decoder order), or None where they do not say;
    ``no_object``: the logits' last column is DETR's no-object class, not a class."""
    shape = shapes[0]
    if fmt is OutputFormat.YOLOV8:
        return shape[1] - 4
    if fmt in (OutputFormat.YOLOV5, OutputFormat.YOLOX):
        return shape[2] - 5
    if fmt is OutputFormat.RTDETR:
        return shape[2] - 4
    if fmt is OutputFormat.DETR:
        return shapes[1][2] - no_object
    if fmt is OutputFormat.YOLO_NAS:
        return shapes[1][2]
    return None


def check_output_shape(fmt: OutputFormat, shape: tuple[int, ...]) -> None:
    """Raise :class:`ModelError` when ``shape`` cannot hold single-output ``fmt``."""
    fits = len(shape) == 3 and (
        (fmt is OutputFormat.YOLOV8 and shape[1] >= 5)
        or (fmt in (OutputFormat.YOLOV5, OutputFormat.YOLOX) and shape[2] >= 6)
        or (fmt in (OutputFormat.END_TO_END, OutputFormat.RTDETR_TOPK) and shape[2] == 6)
        or (fmt is OutputFormat.RTDETR and shape[2] >= 5)
    )
    if not fits:
        raise ModelError(f"output shape {list(shape)} does not fit the {fmt.value} format")
