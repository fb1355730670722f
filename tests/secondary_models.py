"""Tiny ONNX crop models built with onnx.helper, for the secondary-model tests.

Each has the interface of a real crop classifier or embedder (``images``
``[batch, 3, h, w]`` in, ``[batch, values]`` out), small enough to build in
milliseconds, with outputs a test can compute by hand from the crops.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from onnx_models import save_model


def linear_model(
    path: Path,
    weights: np.ndarray,
    *,
    imgsz: tuple[int | str, int | str] = (16, 16),
    batch: int | str = "batch",
    metadata: dict[str, str] | None = None,
    channels: int = 3,
) -> Path:
    """``output = mean over pixels of each channel @ weights``: ``[batch, weights.shape[1]]``.

    The per-channel means of each crop, mixed by ``weights`` (``[3, values]``):
    with the identity the output is the crop's mean colour.
    """
    w = numpy_helper.from_array(weights.astype(np.float32), "w")
    nodes = [
        helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
        helper.make_node("MatMul", ["flat", "w"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "linear_crop_model",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, channels, *imgsz])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [batch, weights.shape[1]])],
        initializer=[w],
    )
    return save_model(graph, path, metadata)


def flatten_model(
    path: Path, *, imgsz: tuple[int, int] = (8, 8), metadata: dict[str, str] | None = None
) -> Path:
    """``output = the crop itself``, flattened to ``[batch, 3 * h * w]``: what the model saw."""
    nodes = [helper.make_node("Flatten", ["images"], ["output0"], axis=1)]
    graph = helper.make_graph(
        nodes,
        "flatten_crop_model",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, *imgsz])],
        [
            helper.make_tensor_value_info(
                "output0", TensorProto.FLOAT, ["batch", 3 * imgsz[0] * imgsz[1]]
            )
        ],
    )
    return save_model(graph, path, metadata)


def declaring_model(path: Path, values: int, *, metadata: dict[str, str] | None = None) -> Path:
    """``output = the crop flattened``, declared ``[batch, values]`` whatever that gives.

    The input size is dynamic (``imgsz`` sets it), so nothing contradicts the
    declaration when the model loads: a model file of about 130 bytes that says its
    output is as large as ``values``.
    """
    nodes = [helper.make_node("Flatten", ["images"], ["output0"], axis=1)]
    graph = helper.make_graph(
        nodes,
        "declaring_crop_model",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", values])],
    )
    return save_model(graph, path, metadata)


def inputless_model(path: Path) -> Path:
    """A model of no input at all: a constant ``[1, 3]`` output."""
    constant = numpy_helper.from_array(np.ones((1, 3), np.float32), "constant")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["constant"], ["output0"])],
        "inputless_model",
        [],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 3])],
        initializer=[constant],
    )
    return save_model(graph, path)


def batch_of_one_model(
    path: Path, *, labels: int = 3, declared: bool = False, batch: int | str = "batch"
) -> Path:
    """A bad export: input ``[batch, 3, 16, 16]``, one output row whatever the batch.

    The row is the sum over the batch of each crop's mean colour (``np.eye(3, labels)``
    mixes it), so one crop alone is read as :func:`linear_model` reads it. ``declared``:
    the output says so, ``[1, labels]``. Else it says ``[batch, labels]``, and nothing
    shows the one row before a run (the axis summed over is computed from the values):
    ONNX Runtime fails any batch of more crops at run time ("the computed output shape").
    """
    initializers = [
        numpy_helper.from_array(np.eye(3, labels, dtype=np.float32), "w"),
        numpy_helper.from_array(np.zeros((), np.float32), "zero"),
        numpy_helper.from_array(np.array([1], np.int64), "one_axis"),
    ]
    nodes = [
        helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
        helper.make_node("MatMul", ["flat", "w"], ["mixed"]),
        # axes = [0], made of the values so that shape inference cannot know it
        helper.make_node("ReduceMin", ["mixed"], ["least"], keepdims=0),
        helper.make_node("Mul", ["least", "zero"], ["nought"]),
        helper.make_node("Cast", ["nought"], ["first"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["first", "one_axis"], ["axes"]),
        helper.make_node("ReduceSum", ["mixed", "axes"], ["output0"], keepdims=1),
    ]
    rows = 1 if declared else "batch"
    graph = helper.make_graph(
        nodes,
        "batch_of_one_crop_model",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [rows, labels])],
        initializer=initializers,
    )
    return save_model(graph, path)
