"""Keypoints and oriented boxes: what a pose or OBB model adds to a detector's rows.

Ultralytics' pose and OBB exports are its detectors with extra channels after
the class scores of every row: ``K x D`` keypoint values (``x, y`` in input
pixels, then a visibility score where ``D`` is 3) or one rotation angle (radians).
The dense layout is ``[B, 4 + nc + extra, N]``, the end-to-end one (``nms=False``,
YOLO26) ``[B, K, 6 + extra]``. The metadata says which (``task``, ``kpt_shape``),
so :func:`recognise_task` reads the task from it, and :func:`detector_outputs`
strips the extra channels from the shapes, so that the family is recognised as
for a plain detector. :class:`Task` then tells the postprocessor how many
channels follow the class scores and what they are.

An OBB row's box is ``cx, cy, w, h`` of the rotated box, in every layout (the
end-to-end one too: ``cx, cy, w, h, score, class, angle``).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from vstream.errors import ModelError
from vstream.postprocess.formats import OutputInfo

COCO_KEYPOINTS = (
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
    "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip",
    "left_knee", "right_knee", "left_ankle", "right_ankle",
)  # fmt: skip
"""The 17 keypoints of COCO's person annotations, in their order: the names a 17-keypoint
model without ``kpt_names`` in its metadata is given."""

COCO_SKELETON = (
    (15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7),
    (6, 8), (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6),
)  # fmt: skip
"""COCO's person skeleton (its annotation file's ``skeleton``, counted from 0): the limbs
drawn for 17 COCO keypoints."""

VISIBLE = 0.5
"""A keypoint scoring at least this is drawn, and can stand for its object on lines and zones."""


@dataclass(frozen=True)
class Task:
    """What a detector's rows carry beyond box, score and class."""

    name: Literal["detect", "pose", "obb"] = "detect"
    keypoints: tuple[int, int] | None = None
    """``(K, D)``: keypoints per object and values per keypoint (2: x, y; 3: x, y, score)."""
    reason: str = "no task in the metadata: a detector"

    @property
    def extra(self) -> int:
        """Channels after the class scores (or after score and class, end to end)."""
        if self.keypoints is not None:
            return self.keypoints[0] * self.keypoints[1]
        return 1 if self.name == "obb" else 0


def _kpt_shape(text: str | None) -> tuple[int, int] | None:
    try:
        value = ast.literal_eval(text) if text else None
    except (ValueError, SyntaxError):
        return None
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) for v in value)
        and 0 < value[0] <= 1000
        and value[1] in (2, 3)
    ):
        return int(value[0]), int(value[1])
    return None


def recognise_task(metadata: Mapping[str, str]) -> Task:
    """The task Ultralytics' metadata names (``task``, ``kpt_shape``); detection otherwise."""
    task = metadata.get("task", "").strip().lower()
    shape = _kpt_shape(metadata.get("kpt_shape"))
    if task == "pose" or (shape is not None and task in ("", "pose")):
        if shape is None:
            raise ModelError(
                f"the metadata names a pose model but its kpt_shape "
                f"{metadata.get('kpt_shape')!r} is not [keypoints, 2 or 3]"
            )
        return Task("pose", shape, f"metadata task=pose, kpt_shape {list(shape)}")
    if task == "obb":
        return Task("obb", None, "metadata task=obb: cx cy w h, class scores, angle")
    return Task()


def detector_outputs(outputs: Sequence[OutputInfo], task: Task) -> list[OutputInfo]:
    """The outputs as a plain detector's: the task's extra channels taken off the first one.

    Channels come before rows in the dense layout (``[B, 4 + nc + extra, N]``, fewer
    channels than rows), after them end to end (``[B, K, 6 + extra]``).
    """
    if not task.extra or not outputs or len(outputs[0].shape) != 3:
        return list(outputs)
    first = outputs[0]
    batch, rows, cols = first.shape
    dense = rows < cols
    shape = (batch, rows - task.extra, cols) if dense else (batch, rows, cols - task.extra)
    if min(shape[1:]) < 5:
        raise ModelError(
            f"output {first.name} {list(first.shape)} is too small for a {task.name} model "
            f"with {task.extra} channels after the class scores"
        )
    return [OutputInfo(first.name, shape), *outputs[1:]]


def keypoint_names(
    task: Task, metadata: Mapping[str, str], given: Sequence[str] | None
) -> tuple[str, ...]:
    """Names of a pose model's keypoints: the config's, else ``kpt_names`` in the metadata
    (a list, or Ultralytics' ``{class: [names]}``: the first class's), else COCO's for 17,
    else ``0, 1, ...``."""
    if task.keypoints is None:
        return ()
    count = task.keypoints[0]
    if given is not None:
        if len(given) != count:
            raise ModelError(f"{len(given)} keypoint names for a model with {count} keypoints")
        return tuple(given)
    try:
        found = ast.literal_eval(metadata.get("kpt_names", "") or "None")
    except (ValueError, SyntaxError):
        found = None
    if isinstance(found, dict) and found:
        found = next(iter(found.values()))
    if isinstance(found, list | tuple) and len(found) == count:
        return tuple(str(name) for name in found)
    if count == len(COCO_KEYPOINTS):
        return COCO_KEYPOINTS
    return tuple(str(i) for i in range(count))
