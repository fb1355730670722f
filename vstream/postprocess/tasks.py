"""What a detector predicts besides its boxes (its task), recognised from the model file.

Ultralytics' segmentation, pose and oriented-box exports are its detection
layouts with values added to every box row after the class scores (32 mask
coefficients; ``kpt_shape`` keypoint values; one angle), and segmentation has
a second output, the mask prototypes ``[B, nm, H/4, W/4]``. So the task is
recognised first, from the layout and the metadata (``task``, ``kpt_shape``),
and it peels off what it adds: the detection family
(:func:`vstream.postprocess.formats.recognise`) then reads what is left as it
reads a plain detector's outputs.

**Adding a task.** Write a recogniser (outputs and metadata in, a
:class:`TaskSpec` or None out) and add it to :data:`RECOGNISERS`: the spec's
``extra`` values per box are cut from the class scores, its ``aux`` outputs
are kept from the family's recognition and reach the postprocess in
:attr:`Recognition.order` after the family's own.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from vstream.config.model import DetrScores
from vstream.errors import ModelError
from vstream.postprocess.formats import OutputFormat, OutputInfo, Recognition, recognise


class Task(str, enum.Enum):
    """What each detected object carries besides its box, score and class."""

    DETECT = "detect"
    """Boxes only."""
    SEGMENT = "segment"
    """An instance mask per box: coefficients times the prototypes output."""
    POSE = "pose"
    """Keypoints per box: ``K x D`` values (``x, y`` in input pixels, a score where D is 3)."""
    OBB = "obb"
    """An oriented box: the box is ``cx, cy, w, h`` of the rotated box, then one angle
    (radians) after the class scores, in every layout (end to end: ``cx, cy, w, h, score,
    class, angle``)."""


NOT_DETECTORS: dict[str, str] = {
    "classify": "a classification model cannot be the primary detector; "
    "use it as a secondary model",
    "semantic": "a semantic segmentation model has no boxes; vstream needs a detector",
}
"""Metadata ``task`` values that name a model vstream cannot run as its detector, and why."""


@dataclass(frozen=True)
class TaskSpec:
    """A task as recognised in a model's outputs: what it adds, where, and why."""

    task: Task
    extra: int = 0
    """Values per box row after the class scores (mask coefficients, keypoints, angle)."""
    aux: tuple[int, ...] = ()
    """Positions of the outputs the task reads beside the detection outputs (prototypes)."""
    reasons: tuple[str, ...] = ()
    keypoints: tuple[int, int] | None = None
    """A pose model's ``(K, D)``: keypoints per object, values per keypoint (2: x, y; 3: x, y,
    score)."""

    def detection_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """``shape`` of a detection output without the task's values per box, taken off the
        axis where what is left is a layout: the columns of an end-to-end ``[B, K, 6+extra]``
        (whatever ``K``, even below ``6 + extra``: a small ``max_det``), else the channels of
        ``[B, 4+nc+extra, N]`` (even above ``N``: a small input), else the columns of rows
        after channels (YOLOv5-seg's ``[B, N, 5+nc+extra]``). Only a dense head of exactly
        ``6 + extra`` anchors would be misread, and its anchors are ``21 h w`` at an input of
        ``32 h x 32 w`` (strides 8, 16, 32): never the 7, 38 or 57 of OBB, segmentation and
        COCO pose. ModelError where no reading fits."""
        if not self.extra or len(shape) != 3:
            return shape
        batch, rows, cols = shape
        if cols - self.extra == 6:  # x1 y1 x2 y2 score class
            return batch, rows, 6
        if 5 <= rows - self.extra <= cols:
            return batch, rows - self.extra, cols
        if rows > cols - self.extra >= 6:
            return batch, rows, cols - self.extra
        raise ModelError(
            f"output {list(shape)} cannot hold {self.extra} {self.task.value} values per box: "
            f"not [B, 4+nc+{self.extra}, N] (channels first, {rows} channels), nor "
            f"[B, K, 6+{self.extra}] or [B, N, 5+nc+{self.extra}] (rows first, {cols} columns)"
        )

    def detection_outputs(self, outputs: Sequence[OutputInfo]) -> list[OutputInfo]:
        """The outputs the detection family is recognised from, as if the task added nothing."""
        return [
            OutputInfo(o.name, self.detection_shape(o.shape))
            for i, o in enumerate(outputs)
            if i not in self.aux
        ]


DETECTION = TaskSpec(Task.DETECT)
"""Boxes only: what a model without a recognised task is read as."""

TaskRecogniser = Callable[[Sequence[OutputInfo], Mapping[str, str]], TaskSpec | None]
"""Recognises one task from the outputs and the metadata, or returns None (not this task)."""


def _segment(outputs: Sequence[OutputInfo], metadata: Mapping[str, str]) -> TaskSpec | None:
    """Segmentation: one ``[B, nm, mh, mw]`` prototypes output beside the detection output."""
    protos = [i for i, o in enumerate(outputs) if len(o.shape) == 4]
    named = metadata.get("task") == Task.SEGMENT.value
    if not protos and not named:
        return None
    shapes = ", ".join(f"{o.name} {list(o.shape)}" for o in outputs)
    if len(protos) != 1 or len(outputs) != 2:
        raise ModelError(
            f"a segmentation model needs a detection output and one [B, nm, mh, mw] prototypes "
            f"output; this one has {shapes}"
        )
    (position,) = protos
    nm = outputs[position].shape[1]
    why = "metadata task=segment; " if named else ""
    return TaskSpec(
        Task.SEGMENT,
        extra=nm,
        aux=(position,),
        reasons=(
            f"{why}output {outputs[position].name!r} {list(outputs[position].shape)}: "
            f"{nm} mask prototypes; the last {nm} values of each box are its coefficients",
        ),
    )


def _kpt_shape(text: str | None) -> tuple[int, int] | None:
    """``kpt_shape`` from the metadata (``[17, 3]``), if it is one."""
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


def _pose(outputs: Sequence[OutputInfo], metadata: Mapping[str, str]) -> TaskSpec | None:
    """Pose: metadata ``task=pose`` (or a ``kpt_shape`` alone), ``K x D`` values per box."""
    named = metadata.get("task", "").strip().lower()
    shape = _kpt_shape(metadata.get("kpt_shape"))
    if named != Task.POSE.value and (shape is None or named):
        return None
    if shape is None:
        raise ModelError(
            f"metadata task=pose, but its kpt_shape {metadata.get('kpt_shape')!r} is not "
            "[keypoints, 2 or 3]"
        )
    count, values = shape
    return TaskSpec(
        Task.POSE,
        extra=count * values,
        keypoints=shape,
        reasons=(
            f"metadata task=pose, kpt_shape {list(shape)}: the last {count * values} values of "
            f"each box are {count} keypoints ({'x, y, score' if values == 3 else 'x, y'})",
        ),
    )


def _obb(outputs: Sequence[OutputInfo], metadata: Mapping[str, str]) -> TaskSpec | None:
    """Oriented boxes: metadata ``task=obb``, one angle per box after the class scores."""
    if metadata.get("task", "").strip().lower() != Task.OBB.value:
        return None
    return TaskSpec(
        Task.OBB,
        extra=1,
        reasons=("metadata task=obb: boxes are cx cy w h of a rotated box, its angle last",),
    )


RECOGNISERS: tuple[TaskRecogniser, ...] = (_segment, _pose, _obb)
"""Tried in order; the first that answers names the task (none: plain detection)."""


NMS_LISTS: dict[int, str] = {
    6: "x1, y1, x2, y2, score, class",
    7: "batch, x1, y1, x2, y2, class, score: YOLOv7's --end2end",
}
"""Columns of the ``[N, 6]`` and ``[N, 7]`` detection lists that NMS inside a model leaves."""


def _two_dimensional(out: OutputInfo) -> str:
    """Why one 2-D output is refused: class scores, or the detection list of an NMS export
    (whose rows of six or seven values a classifier of six or seven classes shares)."""
    shape = list(out.shape)
    listed = NMS_LISTS.get(out.shape[1])
    if listed is None:
        return f"one output {out.name} {shape} of class scores: {NOT_DETECTORS['classify']}"
    return (
        f"one output {out.name} {shape}: detections after NMS inside the model ({listed}) "
        "without a batch axis, a layout vstream does not read (export with Ultralytics' "
        f"nms=True or end2end: [B, K, 6]); if it is a classifier's scores of "
        f"{out.shape[1]} classes: {NOT_DETECTORS['classify']}"
    )


def recognise_task(outputs: Sequence[OutputInfo], metadata: Mapping[str, str]) -> TaskSpec:
    """The task of a model with these outputs and metadata; a model that is no detector, or
    of a task vstream does not read, is refused in one line that says what it is."""
    named = metadata.get("task", "").strip().lower()
    if named in NOT_DETECTORS:
        raise ModelError(f"metadata task={named}: {NOT_DETECTORS[named]}")
    if len(outputs) == 1 and len(outputs[0].shape) == 2 and not named:
        raise ModelError(_two_dimensional(outputs[0]))
    for recogniser in RECOGNISERS:
        spec = recogniser(outputs, metadata)
        if spec is not None:
            return spec
    if named and named != Task.DETECT.value:
        raise ModelError(
            f"metadata task={named}: vstream reads detect and "
            f"{', '.join(t.value for t in Task if t is not Task.DETECT)} models, not {named}"
        )
    return TaskSpec(Task.DETECT, reasons=(f"metadata task={named}",) if named else ())


def recognise_model(
    outputs: Sequence[OutputInfo],
    input_size: tuple[int, int],
    metadata: Mapping[str, str] | None = None,
    extra_inputs: Sequence[str] = (),
    forced: OutputFormat | None = None,
    class_names: int = 0,
    scores: DetrScores | None = None,
) -> tuple[TaskSpec, Recognition]:
    """The task, then the detection family of what the task leaves (see
    :func:`~vstream.postprocess.formats.recognise` for the arguments); the recognition's
    ``order`` holds positions in the model's own outputs, the task's ``aux`` ones last."""
    metadata = metadata or {}
    spec = recognise_task(outputs, metadata)
    detection = [i for i in range(len(outputs)) if i not in spec.aux]
    found = recognise(
        spec.detection_outputs(outputs),
        input_size,
        metadata,
        extra_inputs,
        forced,
        class_names,
        scores,
    )
    order = tuple(detection[i] for i in found.order) + spec.aux
    return spec, dataclasses.replace(found, order=order)


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


def keypoint_names(
    spec: TaskSpec, metadata: Mapping[str, str], given: Sequence[str] | None
) -> tuple[str, ...]:
    """Names of a pose model's keypoints: the config's, else ``kpt_names`` in the metadata
    (a list, or Ultralytics' ``{class: [names]}``: the first class's), else COCO's for 17,
    else ``0, 1, ...``."""
    if spec.keypoints is None:
        return ()
    count = spec.keypoints[0]
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
