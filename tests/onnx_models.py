"""Tiny ONNX detectors built with onnx.helper, for tests that need a real model file.

Each builder writes a model with the same interface as a real detector
(``images`` in, one output of a known layout out), small enough to build in
milliseconds, so tests exercise the real ONNX Runtime path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _save(graph: onnx.GraphProto, path: Path, metadata: dict[str, str] | None = None) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _image_input(
    batch: int | str, height: int | str, width: int | str, elem_type: int = TensorProto.FLOAT
) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("images", elem_type, [batch, 3, height, width])


def constant_output_model(
    path: Path,
    output: np.ndarray,
    *,
    imgsz: tuple[int, int] = (320, 320),
    metadata: dict[str, str] | None = None,
    output_shape: list[int | str] | None = None,
) -> Path:
    """A model whose output is ``output`` whatever the image (plus 0 * sum(image)).

    The image still flows through the graph, so the input binding is exercised.
    """
    const = numpy_helper.from_array(output.astype(np.float32), "raw")
    zero = numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")
    nodes = [
        helper.make_node("ReduceSum", ["images"], ["total"], keepdims=0),
        helper.make_node("Mul", ["total", "zero"], ["nothing"]),
        helper.make_node("Add", ["raw", "nothing"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "constant_detector",
        [_image_input(output.shape[0], imgsz[0], imgsz[1])],
        [
            helper.make_tensor_value_info(
                "output0", TensorProto.FLOAT, output_shape or list(output.shape)
            )
        ],
        initializer=[const, zero],
    )
    return _save(graph, path, metadata)


def scale_model(path: Path, *, elem_type: int = TensorProto.FLOAT) -> Path:
    """``output0 = 2 * images`` with dynamic batch and size: the output mirrors the input."""
    two = numpy_helper.from_array(
        np.array(2.0, dtype=helper.tensor_dtype_to_np_dtype(elem_type)), "two"
    )
    graph = helper.make_graph(
        [helper.make_node("Mul", ["images", "two"], ["output0"])],
        "scale",
        [_image_input("batch", "height", "width", elem_type)],
        [helper.make_tensor_value_info("output0", elem_type, ["batch", 3, "height", "width"])],
        initializer=[two],
    )
    return _save(graph, path)


def flatten_model(path: Path) -> Path:
    """``images`` reshaped to ``[batch, 3 * height * width]`` through a computed shape.

    ONNX Runtime cannot size the second dimension when it loads the model; ONNX
    shape inference with data propagation can, once the input shape is fixed.
    """
    keep_rest = numpy_helper.from_array(np.array([-1], dtype=np.int64), "keep_rest")
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["images"], ["input_shape"], start=0, end=1),
            helper.make_node("Concat", ["input_shape", "keep_rest"], ["flat_shape"], axis=0),
            helper.make_node("Reshape", ["images", "flat_shape"], ["output0"]),
        ],
        "flatten",
        [_image_input("batch", "height", "width")],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", "flat"])],
        initializer=[keep_rest],
    )
    return _save(graph, path)


def nonzero_model(path: Path) -> Path:
    """Indices of bright pixels: an output whose size is only known after each run."""
    half = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half")
    graph = helper.make_graph(
        [
            helper.make_node("Greater", ["images", "half"], ["bright"]),
            helper.make_node("NonZero", ["bright"], ["output0"]),
        ],
        "nonzero",
        [_image_input(1, 8, 8)],
        [helper.make_tensor_value_info("output0", TensorProto.INT64, [4, "n"])],
        initializer=[half],
    )
    return _save(graph, path)
