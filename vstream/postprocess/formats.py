"""The detector output layouts vstream decodes, and how to tell them apart."""

from __future__ import annotations

import enum

from vstream.errors import ModelError

END_TO_END_MAX_DETECTIONS = 1000
"""An ``[B, K, 6]`` output with at most this many rows is read as end-to-end."""


class OutputFormat(str, enum.Enum):
    """Layout of a detector's raw output tensor."""

    YOLOV8 = "yolov8"
    """``[B, 4 + nc, N]``: cx, cy, w, h then one score per class (Ultralytics YOLOv8/YOLO11)."""
    YOLOV5 = "yolov5"
    """``[B, N, 5 + nc]``: cx, cy, w, h, objectness, then class scores."""
    END_TO_END = "end2end"
    """``[B, K, 6]``: x1, y1, x2, y2, score, class, NMS already done in the model."""


def detect_output_format(shape: tuple[int, ...]) -> OutputFormat:
    """Infer the format from a resolved output shape.

    ``[B, K, 6]`` is ambiguous with a one-class YOLOv5 model; small K (at most
    :data:`END_TO_END_MAX_DETECTIONS`) is read as end-to-end, since dense heads
    have thousands of anchors. Pass the format explicitly to override.
    """
    if len(shape) != 3:
        raise ModelError(
            f"detector output must have 3 dimensions [batch, ..., ...], got shape {list(shape)}"
        )
    _, rows, cols = shape
    if cols == 6 and rows <= END_TO_END_MAX_DETECTIONS:
        return OutputFormat.END_TO_END
    if 5 <= rows < cols:
        return OutputFormat.YOLOV8
    if 6 <= cols < rows:
        return OutputFormat.YOLOV5
    raise ModelError(
        f"cannot tell the detector output format from shape {list(shape)}: expected "
        "[B, 4+nc, N] (yolov8), [B, N, 5+nc] (yolov5) or [B, K, 6] (end2end)"
    )


def class_count(fmt: OutputFormat, shape: tuple[int, ...]) -> int | None:
    """Number of classes the output carries, or None where the layout does not say."""
    if fmt is OutputFormat.YOLOV8:
        return shape[1] - 4
    if fmt is OutputFormat.YOLOV5:
        return shape[2] - 5
    return None


def check_output_shape(fmt: OutputFormat, shape: tuple[int, ...]) -> None:
    """Raise :class:`ModelError` when ``shape`` cannot hold ``fmt``."""
    fits = len(shape) == 3 and (
        (fmt is OutputFormat.YOLOV8 and shape[1] >= 5)
        or (fmt is OutputFormat.YOLOV5 and shape[2] >= 6)
        or (fmt is OutputFormat.END_TO_END and shape[2] == 6)
    )
    if not fits:
        raise ModelError(f"output shape {list(shape)} does not fit the {fmt.value} format")
