"""What a secondary model (a crop classifier or embedder) looks like, checked against its options.

Kept apart from :mod:`vstream.inference.secondary` so that ``vstream validate``
can check a cascade with ONNX Runtime alone, without torch.

Preprocessing and labels come from the options where set, else from the
model's metadata (``metadata_props``; values are text, lists as JSON), else
from the defaults:

============== ======================================== ==============
key            value                                    default
============== ======================================== ==============
``labels``     JSON list of labels (``names`` is read   none: label ids
               too, as Ultralytics' classifiers write    as text
               it)
``kind``       ``classifier`` or ``embedding``           the options'
``imgsz``      ``[h, w]`` or one integer                 the input's
``crop``       ``stretch`` or ``square``                 ``stretch``
``crop_round`` ``nearest``, ``floor`` or ``subpixel``    ``nearest``
``resize``     ``linear`` or ``area``                    ``linear``
``input_range`` ``1`` or ``255``                         ``1``
``mean``       ``[r, g, b]`` in input_range units       ``[0, 0, 0]``
``std``        ``[r, g, b]`` in input_range units       ``[1, 1, 1]``
``outputs``    ``logits`` or ``probabilities``           ``logits``
============== ======================================== ==============

A metadata value is held to the option's rule, with one line quoting it where
it breaks it: labels each once, ``imgsz`` integers above 0, ``mean`` and
``std`` within the options' ranges.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vstream.config.base import listed_twice
from vstream.config.model import MAX_LABELS
from vstream.config.secondary import SecondaryConfig
from vstream.errors import ModelError
from vstream.inference.model import (
    INPUT_DTYPES,
    TensorSpec,
    check_image_dtype,
    check_io_budget,
    check_metadata_labels,
    fitting_size,
    infer_output_shapes,
    metadata_channels,
    metadata_size,
    open_for_inspection,
    parse_class_names,
    read_metadata,
    static_size,
    tensor_spec,
)

_CHOICES = {
    "kind": ("classifier", "embedding"),
    "crop": ("stretch", "square"),
    "crop_round": ("nearest", "floor", "subpixel"),
    "resize": ("linear", "area"),
    "outputs": ("logits", "probabilities"),
}


@dataclass(frozen=True)
class SecondarySpec:
    """A secondary model's interface and its preprocessing, resolved once."""

    path: Path
    input: TensorSpec
    output: TensorSpec
    input_size: tuple[int, int]
    """``(height, width)`` of each crop."""
    output_size: int
    """Values per crop: one per label, or the embedding's length."""
    labels: tuple[str, ...]
    """One per output of a classifier (ids as text where neither options nor metadata name
    them); empty for an embedding."""
    crop: str
    crop_round: str
    resize: str
    input_range: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    outputs: str
    """``logits`` or ``probabilities`` (a classifier's); ``embedding`` for an embedding."""
    batch: int
    """Crops bound at once: the model's fixed batch, else ``max_batch``."""
    fixed_batch: int | None
    """The batch the model runs at where it fixes one (its input's, else its output's)."""


def _choice(
    value: str | None, config: SecondaryConfig, metadata: dict[str, str], key: str, default: str
) -> str:
    """The option's ``value`` where set, else the metadata's ``key``, else ``default``; a
    metadata value not among the choices is refused."""
    if value is not None:
        return str(value)
    found = metadata.get(key)
    if found is None:
        return default
    if found not in _CHOICES[key]:
        raise ModelError(
            f"{Path(config.path).name}: metadata {key}={found!r} is not one of "
            f"{', '.join(_CHOICES[key])}"
        )
    return found


def _triple(
    config: SecondaryConfig, metadata: dict[str, str], key: Literal["mean", "std"], default: float
) -> Any:
    value = getattr(config, key)
    if value is not None:
        return tuple(float(v) for v in value)
    found = metadata_channels(Path(config.path), metadata, key)
    return found if found is not None else (default,) * 3


def _input_size(config: SecondaryConfig, image: TensorSpec, metadata: dict[str, str]) -> Any:
    name = Path(config.path).name
    fixed = static_size(image)
    requested = fitting_size(name, fixed, config.imgsz)
    size = fixed or requested
    if size is not None:
        return size
    text = metadata.get("imgsz")
    if text is None:
        raise ModelError(f"{name}: the input size is dynamic and not in the metadata; set imgsz")
    size = metadata_size(metadata)
    if size is None or min(size) <= 0:
        raise ModelError(
            f"{name}: the input size is dynamic and metadata imgsz={text[:80]!r} is not one "
            "integer or [height, width] above 0; set imgsz"
        )
    return size


def _labels(config: SecondaryConfig, metadata: dict[str, str]) -> tuple[str, ...] | None:
    if config.labels is not None:
        return tuple(config.labels)
    key = "labels" if "labels" in metadata else "names"
    text = metadata.get(key)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    path = Path(config.path)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        labels = tuple(value)
    else:
        names = parse_class_names(text)
        if not names or sorted(names) != list(range(len(names))):
            raise ModelError(f"{path.name}: metadata labels {text[:80]!r} are not a list")
        labels = tuple(names[i] for i in range(len(names)))
    check_metadata_labels(path, f"metadata {key}", labels)
    try:  # refused as the config's labels are: two outputs of one label would share its counts
        listed_twice(labels, f"metadata {key}")
    except ValueError as exc:
        raise ModelError(f"{path.name}: {exc}") from None
    return labels


def read_secondary_spec(session: Any, config: SecondaryConfig) -> SecondarySpec:
    """Describe the model in ``session`` and check it fits ``config``; one line if not.

    The model must take one float image ``[batch, 3, height, width]`` and give
    ``[batch, values]`` first (further outputs are not read); a classifier's
    values must be as many as its labels.
    """
    path = Path(config.path)
    inputs = [tensor_spec(i) for i in session.get_inputs()]
    image = inputs[0] if len(inputs) == 1 else None
    channels = image.shape[1] if image is not None and len(image.shape) == 4 else None
    if image is None or len(image.shape) != 4 or (isinstance(channels, int) and channels != 3):
        described = (
            ", ".join(f"{i.name} {i.type_name} {list(i.shape)}" for i in inputs) or "no input"
        )
        raise ModelError(
            f"{path.name}: a secondary model takes one image input [batch, 3, height, width]; "
            f"this model takes {described}"
        )
    check_image_dtype(path, image)
    labelled = config.kind == "classifier" and config.labels is None
    parsed = ("imgsz", "mean", "std", *(("labels", "names") if labelled else ()))
    metadata = read_metadata(session, path, parsed)
    declared = metadata.get("kind")
    if declared is not None and declared != config.kind:
        raise ModelError(
            f"{path.name}: the model's metadata says it is of kind {declared}, "
            f"configured as kind {config.kind}"
        )
    size = _input_size(config, image, metadata)
    output = tensor_spec(session.get_outputs()[0])
    values = output.shape[1] if len(output.shape) == 2 else None
    if len(output.shape) == 2 and not (isinstance(values, int) and values > 0):
        shape = infer_output_shapes(path, image.name, (1, 3, *size)).get(output.name, ())
        values = shape[1] if len(shape) == 2 else None
    if not output.supported or output.dtype_name not in INPUT_DTYPES:
        raise ModelError(f"{path.name}: output {output.name!r} is {output.type_name}, not float")
    if len(output.shape) != 2 or not (isinstance(values, int) and values > 0):
        raise ModelError(
            f"{path.name}: output {output.name!r} must be [batch, values] with a known number "
            f"of values, got {list(output.shape)}"
        )
    fixed_batch = _fixed_batch(path, image, output)
    batch = fixed_batch or config.max_batch
    tensors = [("input", image, (batch, 3, *size)), ("output", output, (batch, values))]
    check_io_budget(path.name, batch, tensors, config.max_io_mib)
    labels: tuple[str, ...] = ()
    if config.kind == "classifier":
        if values > MAX_LABELS:
            raise ModelError(
                f"{path.name}: a classifier gives one value per label, at most {MAX_LABELS:,}; "
                f"output {output.name!r} gives {values:,}"
            )
        found = _labels(config, metadata)
        if found is not None and len(found) != values:
            given = "labels" if config.labels is not None else "the metadata's labels"
            raise ModelError(
                f"{path.name}: {given} name {len(found)} classes but the model gives "
                f"{values} values per crop"
            )
        labels = found if found is not None else tuple(str(i) for i in range(values))
    return SecondarySpec(
        path=path,
        input=image,
        output=output,
        input_size=(int(size[0]), int(size[1])),
        output_size=int(values),
        labels=labels,
        crop=_choice(config.crop.mode, config, metadata, "crop", "stretch"),
        crop_round=_choice(config.crop.round, config, metadata, "crop_round", "nearest"),
        resize=_choice(config.resize, config, metadata, "resize", "linear"),
        input_range=_range(config, metadata),
        mean=_triple(config, metadata, "mean", 0.0),
        std=_triple(config, metadata, "std", 1.0),
        outputs=(
            "embedding"
            if config.kind == "embedding"
            else _choice(config.outputs, config, metadata, "outputs", "logits")
        ),
        batch=batch,
        fixed_batch=fixed_batch,
    )


def _fixed_batch(path: Path, image: TensorSpec, output: TensorSpec) -> int | None:
    """The batch ``path`` runs at where it fixes one, else None.

    An export may fix its output's batch (``[1, labels]``) and not its input's:
    ONNX Runtime would refuse any other batch at run time, failing every stream
    at its first frame, so such a model runs at its output's batch. Input and
    output fixing two batches cannot run at all: one line naming both shapes.
    """
    fixed = (image.fixed_batch, output.fixed_batch)
    if None not in fixed and fixed[0] != fixed[1]:
        raise ModelError(
            f"{path.name}: input {image.name!r} {list(image.shape)} and output "
            f"{output.name!r} {list(output.shape)} fix different batches"
        )
    return image.fixed_batch or output.fixed_batch


def _range(config: SecondaryConfig, metadata: dict[str, str]) -> int:
    if config.input_range is not None:
        return config.input_range
    found = metadata.get("input_range", "1")
    if found not in ("1", "255"):
        name = Path(config.path).name
        raise ModelError(f"{name}: metadata input_range={found!r} is not 1 or 255")
    return int(found)


def check_secondary(config: SecondaryConfig) -> SecondarySpec:
    """Load ``config.path`` in ONNX Runtime (CPU) and check it fits, without torch.

    What ``vstream validate`` runs for each secondary model (beside
    :func:`vstream.config.secondary.check_on_classes` with the detector's names).
    """
    path = Path(config.path)
    if not path.is_file():
        raise ModelError(f"secondary model file not found: {path}")
    session = open_for_inspection(path, "secondary model")
    return read_secondary_spec(session, config)


__all__ = ["SecondarySpec", "check_secondary", "read_secondary_spec"]
