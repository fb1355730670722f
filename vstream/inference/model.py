"""What an ONNX detector looks like from the outside: inputs, outputs, class names.

Read from an ONNX Runtime session (what will actually run) plus the model's
metadata, where Ultralytics exports store ``names``, ``imgsz`` and ``stride``.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from vstream.errors import ModelError

# ONNX Runtime type strings -> (numpy dtype, torch dtype)
_DTYPES: dict[str, tuple[np.dtype, torch.dtype]] = {
    "tensor(float)": (np.dtype(np.float32), torch.float32),
    "tensor(float16)": (np.dtype(np.float16), torch.float16),
    "tensor(double)": (np.dtype(np.float64), torch.float64),
    "tensor(int64)": (np.dtype(np.int64), torch.int64),
    "tensor(int32)": (np.dtype(np.int32), torch.int32),
    "tensor(uint8)": (np.dtype(np.uint8), torch.uint8),
    "tensor(bool)": (np.dtype(np.bool_), torch.bool),
}
INPUT_DTYPES = (torch.float32, torch.float16)
"""Input element types the preprocessing can write."""

Dim = int | str | None
"""A dimension: a size, a symbolic name, or unknown."""


@dataclass(frozen=True)
class TensorSpec:
    """Name, element type and (possibly symbolic) shape of a model input or output."""

    name: str
    type_name: str
    shape: tuple[Dim, ...]

    @property
    def numpy_dtype(self) -> np.dtype:
        return _DTYPES[self.type_name][0]

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.type_name][1]

    @property
    def supported(self) -> bool:
        return self.type_name in _DTYPES


@dataclass(frozen=True)
class ModelSpec:
    """The interface of a detector model."""

    path: Path
    input: TensorSpec
    outputs: tuple[TensorSpec, ...]
    class_names: dict[int, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def fixed_batch(self) -> int | None:
        dim = self.input.shape[0]
        return dim if isinstance(dim, int) and dim > 0 else None

    @property
    def fixed_input_size(self) -> tuple[int, int] | None:
        """``(height, width)`` when the model's spatial input size is static."""
        h, w = self.input.shape[2], self.input.shape[3]
        if isinstance(h, int) and isinstance(w, int) and h > 0 and w > 0:
            return h, w
        return None

    @property
    def metadata_imgsz(self) -> tuple[int, int] | None:
        """``(height, width)`` recorded in the metadata (``imgsz``), if any."""
        value = _literal(self.metadata.get("imgsz"))
        if isinstance(value, int):
            return value, value
        if (
            isinstance(value, (list, tuple))
            and len(value) == 2
            and all(isinstance(v, int) for v in value)
        ):
            return value[0], value[1]
        return None

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


def _tensor_spec(node: Any) -> TensorSpec:
    shape = tuple(d if isinstance(d, (int, str)) else None for d in node.shape)
    return TensorSpec(name=node.name, type_name=node.type, shape=shape)


def read_model_spec(session: Any, path: Path) -> ModelSpec:
    """Describe the model loaded in ``session`` and check it can be a detector."""
    inputs = session.get_inputs()
    if len(inputs) != 1:
        names = [i.name for i in inputs]
        raise ModelError(f"{path.name}: a detector takes one image input, this model takes {names}")
    image = _tensor_spec(inputs[0])
    channels = image.shape[1] if len(image.shape) == 4 else None
    if len(image.shape) != 4 or (isinstance(channels, int) and channels != 3):
        raise ModelError(
            f"{path.name}: input {image.name!r} must be [batch, 3, height, width], "
            f"got {list(image.shape)}"
        )
    if not image.supported or image.torch_dtype not in INPUT_DTYPES:
        raise ModelError(
            f"{path.name}: input {image.name!r} is {image.type_name}; "
            "only float32 and float16 image inputs are supported"
        )
    outputs = tuple(_tensor_spec(o) for o in session.get_outputs())
    for out in outputs:
        if not out.supported:
            raise ModelError(
                f"{path.name}: output {out.name!r} has unsupported type {out.type_name}"
            )
    metadata = dict(session.get_modelmeta().custom_metadata_map)
    return ModelSpec(
        path=path,
        input=image,
        outputs=outputs,
        class_names=parse_class_names(metadata.get("names")),
        metadata=metadata,
    )


def infer_output_shapes(
    path: Path, input_name: str, input_shape: tuple[int, ...]
) -> dict[str, tuple[Dim, ...]]:
    """Output shapes found by ONNX shape inference with the input shape fixed."""
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


def declared_batch(path: Path) -> int | None:
    """The batch the model file fixes for its image input; None if dynamic or unreadable.

    Read from the graph without creating a session, for callers that choose a
    batch size before loading the model (loading reports unreadable files).
    """
    try:
        model = onnx.load(str(path), load_external_data=False)
        dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    except Exception:  # missing or corrupt: loading the model reports it properly
        return None
    return dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else None
