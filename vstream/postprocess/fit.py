"""What a detector makes of its model: the task, the family, the class and keypoint names.

Read from the model's spec (its inputs, outputs at the batch it runs and metadata)
and the ``model`` section of the config, without torch: :class:`vstream.Detector`
runs it on its preallocated outputs, ``vstream validate`` on ONNX Runtime's
shapes, so that every model check a run makes at start, validate makes too (a
``dtype``, ``format``, ``scores`` or ``class_names`` that does not fit passed
validate, then failed the run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vstream.config.model import ModelConfig
from vstream.errors import ModelError
from vstream.inference.model import ModelSpec
from vstream.postprocess.formats import OutputFormat, OutputInfo, Recognition, class_count
from vstream.postprocess.tasks import TaskSpec, keypoint_names, recognise_model


@dataclass(frozen=True)
class ModelFit:
    """How a detector reads its model's outputs (:func:`fit_model`)."""

    task: TaskSpec
    recognition: Recognition
    """The family, which output plays which part, and why (``vstream info`` prints it)."""
    class_names: dict[int, str]
    """By class id: the config's, else the metadata's; empty where neither names any."""
    keypoint_names: tuple[str, ...]
    """A pose model's keypoints: the config's, the metadata's, COCO's for 17."""


def fit_model(
    spec: ModelSpec,
    model: ModelConfig,
    input_size: tuple[int, int],
    shapes: Sequence[tuple[int, ...] | None],
) -> ModelFit:
    """Read ``spec`` as ``model`` says, its outputs of ``shapes`` at the batch it runs (None:
    sized only per run) for a ``(height, width)`` input; ModelError, one line, for what
    does not fit: the input's dtype, an output of no fixed size, the family or its scores,
    the number of class or keypoint names."""
    name = spec.path.name
    if model.dtype != "auto" and spec.input.dtype_name != model.dtype:
        raise ModelError(
            f"{name}: the model input is {spec.input.dtype_name}, the config says {model.dtype}"
        )
    fixed: list[tuple[int, ...]] = []
    for output, shape in zip(spec.outputs, shapes, strict=True):
        if shape is None:
            raise ModelError(
                f"{name}: the size of output {output.name!r} is not fixed; a detector output "
                "must be"
            )
        fixed.append(shape)
    given = model.names()
    task, recognition = recognise_model(
        [OutputInfo(o.name, shape) for o, shape in zip(spec.outputs, fixed, strict=True)],
        input_size,
        spec.metadata,
        [i.name for i in spec.size_inputs],
        OutputFormat(model.format) if model.format is not None else None,
        len(given or spec.class_names),
        model.scores,
    )
    keypoints = keypoint_names(task, spec.metadata, model.keypoint_names)
    if given is None:
        names = dict(spec.class_names)
    elif isinstance(given, Mapping):
        names = {int(k): str(v) for k, v in given.items()}
    else:
        names = dict(enumerate(given))
    detection = [task.detection_shape(fixed[i]) for i in recognition.order]
    expected = class_count(recognition.format, detection, recognition.no_object)
    if names and expected is not None and len(names) != expected:
        raise ModelError(f"{name}: {len(names)} class names for a model with {expected} classes")
    return ModelFit(task, recognition, names, keypoints)
