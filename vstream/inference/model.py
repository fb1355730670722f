"""What an ONNX detector looks like from the outside: inputs, outputs, class names.

Read from an ONNX Runtime session (what will actually run) plus the model's
metadata, where Ultralytics exports store ``names``, ``imgsz`` and ``stride``.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from vstream.config.base import has_control_character
from vstream.config.model import MAX_LABELS, model_channels
from vstream.errors import ModelError
from vstream.inference.hf_folder import ImageProcessor, read_id2label, read_image_processor

# ONNX Runtime type strings -> numpy dtype names (torch's dtypes have the same names).
_DTYPES: dict[str, str] = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}
INPUT_DTYPES = ("float32", "float16")
"""Input element types the preprocessing can write."""

DEFAULT_IMGSZ = 640
CHANNEL_KEYS: tuple[Literal["mean", "std"], ...] = ("mean", "std")
"""The metadata's per-channel normalisation, which a config's ``mean`` and ``std`` override."""
MAX_METADATA_CHARS = 256 * 1024
"""Longest metadata value read as a list or a literal: names for about 8 000 classes."""

Dim = int | str | None
"""A dimension: a size, a symbolic name, or unknown."""


@dataclass(frozen=True)
class TensorSpec:
    """Name, element type and (possibly symbolic) shape of a model input or output."""

    name: str
    type_name: str
    shape: tuple[Dim, ...]

    @property
    def dtype_name(self) -> str:
        """``float32``, ``float16``, ...: the same name in numpy and torch."""
        return _DTYPES[self.type_name]

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(self.dtype_name)

    @property
    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype_name)

    @property
    def supported(self) -> bool:
        return self.type_name in _DTYPES

    @property
    def fixed_batch(self) -> int | None:
        """The first dimension where the model fixes it, else None."""
        dim = self.shape[0] if self.shape else None
        return dim if isinstance(dim, int) and dim > 0 else None


@dataclass(frozen=True)
class ModelSpec:
    """The interface of a detector model."""

    path: Path
    input: TensorSpec
    outputs: tuple[TensorSpec, ...]
    class_names: dict[int, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    size_inputs: tuple[TensorSpec, ...] = ()
    """``[B, 2]`` inputs beside the image (``orig_target_sizes``): bound once to the
    input's (width, height), see :meth:`ModelSession._size_input`."""
    processor: ImageProcessor | None = None
    """The ``preprocessor_config.json`` beside the model, if any (Hugging Face folders)."""
    names_source: str = "metadata names"
    """Where :attr:`class_names` came from, for ``vstream info``."""
    channels: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """The metadata's ``mean`` and ``std``, where it gives them (checked as the config's)."""

    @property
    def fixed_batch(self) -> int | None:
        return self.input.fixed_batch

    @property
    def fixed_input_size(self) -> tuple[int, int] | None:
        """``(height, width)`` when the model's spatial input size is static."""
        return static_size(self.input)

    @property
    def metadata_imgsz(self) -> tuple[int, int] | None:
        """``(height, width)`` recorded in the metadata (``imgsz``), if any."""
        return metadata_size(self.metadata)

    @property
    def stride(self) -> int:
        """Largest stride of the detector (``stride`` in the metadata, else 32)."""
        value = _literal(self.metadata.get("stride"))
        return value if isinstance(value, int) and value > 0 else 32


def _literal(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        try:
            return json.loads(text)
        except ValueError:
            return None


def parse_class_names(text: str | None) -> dict[int, str]:
    """Class names from metadata: an Ultralytics dict repr, a JSON object or a list."""
    value = _literal(text)
    if isinstance(value, dict):
        try:
            return {int(k): str(v) for k, v in value.items()}
        except (TypeError, ValueError):
            return {}
    if isinstance(value, (list, tuple)):
        return {i: str(v) for i, v in enumerate(value)}
    return {}


def tensor_spec(node: Any) -> TensorSpec:
    shape = tuple(d if isinstance(d, (int, str)) else None for d in node.shape)
    return TensorSpec(name=node.name, type_name=node.type, shape=shape)


def _is_size_input(spec: TensorSpec) -> bool:
    """A ``[B, 2]`` integer or float input: the image size DETR exports take."""
    return (
        spec.supported
        and len(spec.shape) == 2
        and spec.shape[1] in (2, None)
        and spec.dtype_name in ("int64", "int32", "float32")
    )


def check_image_dtype(path: Path, image: TensorSpec) -> None:
    """Refuse an image input of a type the letterbox and the crops cannot write (one line):
    the detector's and the secondary models' inputs are filled by the same code."""
    if not image.supported or image.dtype_name not in INPUT_DTYPES:
        raise ModelError(
            f"{path.name}: input {image.name!r} is {image.type_name}; "
            "only float32 and float16 image inputs are supported"
        )


def read_model_spec(session: Any, path: Path) -> ModelSpec:
    """Describe the model loaded in ``session`` and check it can be a detector.

    One input is the image (the 4-dimensional one); the others may only be
    ``[B, 2]`` image sizes, which DETR exports take to scale their boxes.
    """
    inputs = [tensor_spec(i) for i in session.get_inputs()]
    images = [i for i in inputs if len(i.shape) == 4] if len(inputs) > 1 else inputs
    others = [i for i in inputs if i not in images]
    if len(images) != 1 or not all(_is_size_input(i) for i in others):
        described = ", ".join(f"{i.name} {i.type_name} {list(i.shape)}" for i in inputs)
        raise ModelError(
            f"{path.name}: a detector takes one image input and at most [B, 2] image sizes "
            f"(orig_target_sizes) beside it; this model takes {described}"
        )
    image = images[0]
    channels = image.shape[1] if len(image.shape) == 4 else None
    if len(image.shape) != 4 or (isinstance(channels, int) and channels != 3):
        raise ModelError(
            f"{path.name}: input {image.name!r} must be [batch, 3, height, width], "
            f"got {list(image.shape)}"
        )
    check_image_dtype(path, image)
    outputs = tuple(tensor_spec(o) for o in session.get_outputs())
    for out in outputs:
        if not out.supported:
            raise ModelError(
                f"{path.name}: output {out.name!r} has unsupported type {out.type_name}"
            )
    metadata = read_metadata(session, path, ("names", "imgsz", "stride", *CHANNEL_KEYS))
    channels = {
        key: found for key in CHANNEL_KEYS if (found := metadata_channels(path, metadata, key))
    }
    class_names = parse_class_names(metadata.get("names"))
    names_source = "metadata names"
    if not class_names:  # a Hugging Face folder: the names are in config.json
        class_names, names_source = read_id2label(path), "config.json id2label"
    check_metadata_labels(path, names_source, class_names.values())
    return ModelSpec(
        path=path,
        input=image,
        outputs=outputs,
        class_names=class_names,
        metadata=metadata,
        size_inputs=tuple(others),
        processor=read_image_processor(path),
        names_source=names_source,
        channels=channels,
    )


def read_metadata(session: Any, path: Path, parsed: Iterable[str]) -> dict[str, str]:
    """The model's metadata, refusing a value of the ``parsed`` keys longer than
    :data:`MAX_METADATA_CHARS` (one line, a ModelError).

    Those values are read as Python literals, whose parser takes about 470 bytes of memory
    per character of a list (8 MB of metadata would take 3.7 GB and a minute).
    """
    metadata = dict(session.get_modelmeta().custom_metadata_map)
    for key in parsed:
        length = len(metadata.get(key, ""))
        if length > MAX_METADATA_CHARS:
            raise ModelError(
                f"{path.name}: metadata {key} is {length:,} characters long; "
                f"at most {MAX_METADATA_CHARS:,} are read"
            )
    return metadata


def metadata_channels(
    path: Path, metadata: Mapping[str, str], key: Literal["mean", "std"]
) -> tuple[float, float, float] | None:
    """The metadata's ``mean`` or ``std`` of the model at ``path``, held to the config's rule
    (:func:`~vstream.config.model.model_channels`); None where it gives none."""
    text = metadata.get(key)
    if text is None:
        return None
    return model_channels(f"{path.name}: metadata {key}={text[:80]!r}", key, _literal(text))


def check_metadata_labels(path: Path, source: str, labels: Collection[str]) -> None:
    """Refuse class names or labels read from a model's files (``source``: where, as
    ``metadata names`` or ``config.json id2label``) that could not be shown safely, as a
    config's are refused: more than :data:`MAX_LABELS`, or one holding a control character
    (a line break in it would forge lines of the logs and the summary)."""
    if len(labels) > MAX_LABELS:
        raise ModelError(
            f"{path.name}: {source} names {len(labels):,} classes, more than {MAX_LABELS:,}"
        )
    for label in labels:
        if has_control_character(label):
            shown = label if len(label) <= 40 else label[:37] + "..."
            raise ModelError(
                f"{path.name}: {source} holds a label with a control character: {shown!r}"
            )


def infer_output_shapes(
    path: Path, input_name: str, input_shape: tuple[int, ...]
) -> dict[str, tuple[Dim, ...]]:
    """Output shapes found by ONNX shape inference with the input shape fixed."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for graph_input in model.graph.input:
        if graph_input.name == input_name:
            dims = graph_input.type.tensor_type.shape.dim
            for dim, size in zip(dims, input_shape, strict=True):
                dim.Clear()
                dim.dim_value = size
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    shapes = {}
    for output in inferred.graph.output:
        dims = output.type.tensor_type.shape.dim
        shapes[output.name] = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims
        )
    return shapes


def output_shapes(
    spec: ModelSpec, input_shape: tuple[int, ...]
) -> dict[str, tuple[int, ...] | None]:
    """Static output shapes: from the model, its symbolic input dims, or shape inference.

    Each dimension is taken from whichever source knows it: shape inference
    may size a dimension the model leaves symbolic and still echo a
    declared symbol (``batch``) for another one, which the input resolves.
    None for an output whose size is only known per run.
    """
    symbols = {
        dim: size
        for dim, size in zip(spec.input.shape, input_shape, strict=True)
        if isinstance(dim, str)
    }

    def resolve(dim: Any) -> Any:
        return symbols.get(dim, dim) if isinstance(dim, str) else dim

    shapes: dict[str, tuple[int, ...] | None] = {}
    inferred: dict[str, Any] | None = None
    for out in spec.outputs:
        dims = tuple(resolve(d) for d in out.shape)
        if not all(isinstance(d, int) and d > 0 for d in dims):
            if inferred is None:
                inferred = infer_output_shapes(spec.path, spec.input.name, input_shape)
            found = inferred.get(out.name)
            if found is not None and len(found) == len(dims):
                dims = tuple(
                    d if isinstance(d, int) and d > 0 else resolve(f)
                    for d, f in zip(dims, found, strict=True)
                )
        shapes[out.name] = dims if all(isinstance(d, int) and d > 0 for d in dims) else None
    return shapes


def check_io_budget(
    name: str,
    batch: int,
    tensors: Sequence[tuple[str, TensorSpec, tuple[int, ...]]],
    budget_mib: int,
) -> None:
    """Refuse a model whose bound ``tensors`` (role, spec, shape at ``batch``) would take more
    than ``budget_mib`` (its ``max_io_mib``): one line, a ModelError.

    Checked from the declared shapes before anything is allocated: a model file
    of a few hundred bytes can declare terabytes, which allocating would turn
    into a crash at start (or, reading the labels of 2e9 outputs, 11 GB taken
    by ``vstream validate``).
    """
    sizes = [math.prod(shape) * spec.numpy_dtype.itemsize for _, spec, shape in tensors]
    total = sum(sizes)
    if total <= budget_mib * 2**20:
        return
    role, spec, shape = tensors[sizes.index(max(sizes))]
    declared = ", ".join(str(d) for d in spec.shape)
    raise ModelError(
        f"{name}: its inputs and outputs would take {_mib(total)} at batch {batch}, more than "
        f"max_io_mib ({budget_mib} MiB); the largest is {role} {spec.name!r}, declared "
        f"[{declared}] {spec.dtype_name}: {list(shape)} is {_mib(max(sizes))}"
    )


def _mib(size: int) -> str:
    return f"{math.ceil(size / 2**20):,} MiB"


def check_detector_budget(
    spec: ModelSpec,
    input_shape: tuple[int, ...],
    outputs: dict[str, tuple[int, ...] | None],
    budget_mib: int,
) -> None:
    """:func:`check_io_budget` for a detector's image and size inputs and its ``outputs`` at
    ``input_shape`` (those only sized per run cannot be checked before it)."""
    batch = input_shape[0]
    tensors = [
        ("input", spec.input, input_shape),
        *(("input", size, (batch, 2)) for size in spec.size_inputs),
        *(("output", out, outputs[out.name]) for out in spec.outputs if outputs[out.name]),
    ]
    check_io_budget(spec.path.name, batch, tensors, budget_mib)


def static_size(image: TensorSpec) -> tuple[int, int] | None:
    """``(height, width)`` of an NCHW input whose spatial size is static, else None."""
    h, w = image.shape[2], image.shape[3]
    if isinstance(h, int) and isinstance(w, int) and h > 0 and w > 0:
        return h, w
    return None


def metadata_size(metadata: dict[str, str]) -> tuple[int, int] | None:
    """``(height, width)`` a model's metadata records as ``imgsz`` (one int or two), if any.

    ``True`` is no size, though Python counts it an int (it would be read as 1x1).
    """
    value = _literal(metadata.get("imgsz"))
    if _whole(value):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(_whole(v) for v in value):
        return value[0], value[1]
    return None


def _whole(value: Any) -> bool:
    """An int, and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def fitting_size(
    name: str, fixed: tuple[int, int] | None, imgsz: int | Sequence[int] | None
) -> tuple[int, int] | None:
    """``imgsz`` as ``(height, width)`` (None when not asked), refused where the model file
    ``name`` fixes another size: one rule for the detector and the secondary models."""
    requested = (imgsz, imgsz) if isinstance(imgsz, int) else imgsz
    if fixed is not None and requested is not None and tuple(requested) != fixed:
        raise ModelError(
            f"{name} takes a fixed {fixed[1]}x{fixed[0]} input; "
            f"imgsz {requested[1]}x{requested[0]} does not fit (leave imgsz unset)"
        )
    return None if requested is None else (requested[0], requested[1])


def input_size(spec: ModelSpec, imgsz: int | tuple[int, int] | None) -> tuple[int, int]:
    """The ``(height, width)`` the model runs at: fixed by the model, asked for, or a default."""
    return sized_input(spec, imgsz)[0]


def sized_input(
    spec: ModelSpec, imgsz: int | tuple[int, int] | None
) -> tuple[tuple[int, int], str]:
    """:func:`input_size`, and where it came from in words (``vstream info``): the model, the
    config, its metadata's ``imgsz``, the ``preprocessor_config.json`` beside it, or the
    default."""
    requested = fitting_size(spec.path.name, spec.fixed_input_size, imgsz)
    if spec.fixed_input_size is not None:
        return spec.fixed_input_size, "fixed by the model"
    processor = spec.processor.size if spec.processor is not None else None
    size, source = next(
        (size, source)
        for size, source in (
            (requested, "from the config"),
            (spec.metadata_imgsz, "from the model metadata"),
            (processor, f"from {spec.processor.source}" if spec.processor else ""),
            ((DEFAULT_IMGSZ, DEFAULT_IMGSZ), "the default"),
        )
        if size is not None
    )
    stride = spec.stride
    # The processor's size is what the model was trained at (RF-DETR's 560 is no multiple
    # of 32): the stride rule is for sizes asked of a dense head.
    if size is not processor and any(s <= 0 or s % stride for s in size):
        raise ModelError(
            f"imgsz {list(size)} must be positive multiples of the model stride {stride}"
        )
    return (size[0], size[1]), source


CUDA_BATCH = 32
"""The batch a GPU pipeline runs when neither the config nor the model fixes one: frames of
many streams in one run (a GPU does 32 frames in little more time than one), while the
buckets (1, 2, 4 ... 32) keep a part-filled batch about as cheap as what it holds."""


def batch_size(spec: ModelSpec, requested: int | None, device: str = "cpu") -> int:
    """The batch the engine runs: as asked, else the model's fixed batch, else
    :data:`CUDA_BATCH` on a GPU and 1 on a CPU (where a batch costs what its frames do)."""
    if requested is None:
        return spec.fixed_batch or (CUDA_BATCH if device != "cpu" else 1)
    if requested < 1:
        raise ModelError(f"batch size must be at least 1, got {requested}")
    fixed = spec.fixed_batch
    if fixed is not None and fixed != requested:
        raise ModelError(
            f"{spec.path.name} has a fixed batch of {fixed}; batch size {requested} does not fit"
        )
    return requested


def open_for_inspection(path: str | Path, what: str) -> Any:
    """An ONNX Runtime session (CPU) made only to read ``path``'s inputs, outputs and metadata.

    A model that does not load is one line naming ``what`` (``model``,
    ``secondary model``) and ONNX Runtime's first line, never a traceback.
    """
    from vstream.inference.wheels import load_onnxruntime

    ort = load_onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    # Only the inputs and outputs are read: optimising the graph for runs is not needed
    # (about 0.1 s of loading a YOLOv8n, an eighth of what vstream validate takes).
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # ONNX Runtime raises several unrelated types
        first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        raise ModelError(f"cannot load {what} {path}: {first}") from None


@dataclass(frozen=True)
class CheckedModel:
    """A detector model as :func:`check_model` found it fit."""

    spec: ModelSpec
    input_size: tuple[int, int]
    """``(height, width)`` it runs at."""
    output_shapes: list[tuple[int, ...] | None]
    """Each output's shape at the batch it runs (None: sized only per run), in its order."""


def check_model(
    path: str | Path,
    imgsz: int | tuple[int, int] | None,
    requested_batch: int | None,
    budget_mib: int,
    device: str = "cpu",
) -> CheckedModel:
    """Load ``path`` in ONNX Runtime (CPU) and check it fits the options, without torch.

    What ``vstream validate`` runs: the model loads, has one image input,
    its fixed size and batch (if any) fit ``imgsz`` and the batch size, and
    its inputs and outputs at that batch (on ``device``, a type: ``cuda`` runs 32
    unless asked) fit ``budget_mib`` (the model's ``max_io_mib``), as
    :class:`~vstream.inference.session.ModelSession` checks them before allocating.
    """
    session = open_for_inspection(path, "model")
    spec = read_model_spec(session, Path(path))
    height, width = input_size(spec, imgsz)
    batch = batch_size(spec, requested_batch, device)
    input_shape = (batch, 3, height, width)
    shapes = output_shapes(spec, input_shape)
    check_detector_budget(spec, input_shape, shapes, budget_mib)
    return CheckedModel(spec, (height, width), [shapes[o.name] for o in spec.outputs])
