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


def save_model(graph: onnx.GraphProto, path: Path, metadata: dict[str, str] | None = None) -> Path:
    """``graph`` as a checked model file at ``path`` (opset 17, IR 8), with ``metadata``."""
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
    return save_model(graph, path, metadata)


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
    return save_model(graph, path)


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
    return save_model(graph, path)


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
    return save_model(graph, path)


def brightness_model(path: Path, *, imgsz: int = 64, batch: int | str = "batch") -> Path:
    """A one-class YOLOv8-layout detector whose box moves with the image's mean brightness.

    Output ``[B, 5, 8]``: anchor 0 of each image is a box centred at
    ``x = 8 + 48 * mean(image)``, ``y = imgsz / 2``, 8 pixels square, score
    0.9; the other anchors are empty. Frames of different brightness get
    different boxes, so a result handed to the wrong frame shows.
    """

    def scalar(name: str, value: float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(value, dtype=np.float32), name)

    nodes = [
        helper.make_node("ReduceMean", ["images"], ["mean"], axes=[1, 2, 3], keepdims=1),
        helper.make_node("Squeeze", ["mean", "last_axis"], ["mean3"]),  # [B, 1, 1]
        helper.make_node("Mul", ["mean3", "gain"], ["scaled"]),
        helper.make_node("Add", ["scaled", "offset"], ["cx"]),
        helper.make_node("Mul", ["mean3", "zero"], ["nothing"]),
        helper.make_node("Add", ["nothing", "centre"], ["cy"]),
        helper.make_node("Add", ["nothing", "side"], ["size"]),
        helper.make_node("Add", ["nothing", "score"], ["conf"]),
        helper.make_node("Concat", ["cx", "cy", "size", "size", "conf"], ["anchor0"], axis=1),
        helper.make_node("Pad", ["anchor0", "pads"], ["output0"]),
    ]
    initializers = [
        numpy_helper.from_array(np.array([3], dtype=np.int64), "last_axis"),
        scalar("gain", 48.0),
        scalar("offset", 8.0),
        scalar("zero", 0.0),
        scalar("centre", imgsz / 2),
        scalar("side", 8.0),
        scalar("score", 0.9),
        numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 7], dtype=np.int64), "pads"),
    ]
    graph = helper.make_graph(
        nodes,
        "brightness",
        [_image_input(batch, imgsz, imgsz)],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [batch, 5, 8])],
        initializer=initializers,
    )
    return save_model(graph, path, {"names": str({0: "blob"})})


def partly_inferred_model(path: Path) -> Path:
    """Output ``[batch, 6, 10]`` declared as ``[batch, rows, cols]``; inference sizes only 6 and 10.

    The batch reaches the output through a shape tensor that ONNX data
    propagation cannot follow (a square root and back), as in some exported
    detectors, so shape inference echoes the declared ``batch``.
    """
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["images"], ["input_shape"], start=0, end=1),
            helper.make_node("Cast", ["input_shape"], ["as_float"], to=TensorProto.FLOAT),
            helper.make_node("Sqrt", ["as_float"], ["root"]),
            helper.make_node("Mul", ["root", "root"], ["squared"]),
            helper.make_node("Round", ["squared"], ["rounded"]),
            helper.make_node("Cast", ["rounded"], ["batch_dim"], to=TensorProto.INT64),
            helper.make_node("Concat", ["batch_dim", "rows_cols"], ["out_shape"], axis=0),
            helper.make_node("ReduceMean", ["images"], ["per_row"], axes=[3], keepdims=0),
            helper.make_node("Reshape", ["per_row", "out_shape"], ["output0"]),
        ],
        "partly_inferred",
        [_image_input("batch", 20, 32)],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", "rows", "cols"])],
        initializer=[numpy_helper.from_array(np.array([6, 10], dtype=np.int64), "rows_cols")],
    )
    return save_model(graph, path)


def family_model(
    path: Path,
    outputs: dict[str, np.ndarray],
    *,
    imgsz: tuple[int, int] = (320, 320),
    metadata: dict[str, str] | None = None,
    sized: str | None = None,
) -> Path:
    """A detector with a family's output names, shapes and dtypes and known output values.

    Each output is its constant (plus 0 * sum(image), so the image flows
    through). With ``sized``, the model also takes ``orig_target_sizes``
    (``[B, 2]`` int64, width then height, as RT-DETR, D-FINE and DEIM do) and
    the output named ``sized``, normalised xyxy boxes, is multiplied by it:
    the boxes are only right if the size input is bound right.
    """
    batch = next(iter(outputs.values())).shape[0]
    nodes = [
        helper.make_node("ReduceSum", ["images"], ["total"], keepdims=0),
        helper.make_node("Mul", ["total", "zero"], ["nothing"]),
    ]
    initializers = [numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")]
    graph_outputs = []
    for name, value in outputs.items():
        elem_type = helper.np_dtype_to_tensor_dtype(value.dtype)
        initializers.append(numpy_helper.from_array(value, f"{name}_value"))
        nodes.append(helper.make_node("Cast", ["nothing"], [f"{name}_nothing"], to=elem_type))
        result = f"{name}_unsized" if name == sized else name
        nodes.append(helper.make_node("Add", [f"{name}_value", f"{name}_nothing"], [result]))
        graph_outputs.append(helper.make_tensor_value_info(name, elem_type, list(value.shape)))
    inputs = [_image_input(batch, imgsz[0], imgsz[1])]
    if sized is not None:
        inputs.append(
            helper.make_tensor_value_info("orig_target_sizes", TensorProto.INT64, [batch, 2])
        )
        initializers.append(numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "twice"))
        initializers.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"))
        nodes += [
            helper.make_node("Cast", ["orig_target_sizes"], ["sizes"], to=TensorProto.FLOAT),
            helper.make_node("Tile", ["sizes", "twice"], ["whwh"]),
            helper.make_node("Unsqueeze", ["whwh", "axis1"], ["whwh_rows"]),
            helper.make_node("Mul", [f"{sized}_unsized", "whwh_rows"], [sized]),
        ]
    graph = helper.make_graph(
        nodes, "family_detector", inputs, graph_outputs, initializer=initializers
    )
    return save_model(graph, path, metadata)


TASK_KEYPOINTS = ("top", "left", "right", "bottom", "centre")
"""The keypoints of :func:`task_model`'s pose model, by name."""


def task_model(
    source: Path, path: Path, task: str, seed: int = 0, visibility_shift: float = 0.0
) -> Path:
    """A pose or OBB model in Ultralytics' dense layout, grown from the detector ``source``.

    The detector's ``output0`` (``[B, 4 + nc, N]``: cx, cy, w, h, class scores) is renamed and
    extended with what a pose or OBB head adds after the class scores, computed from each
    row's box and scores, so that the additions follow the picture as a trained head's do
    (neighbouring rows of one object agree, objects differ):

    - ``pose``: 5 keypoints (:data:`TASK_KEYPOINTS`), ``x, y`` in input pixels at fixed
      places of the box moved by the class scores (some fall outside the box and the
      frame), and a visibility score ``sigmoid(6 (p - 0.3) + b)`` of one class's score
      ``p``, on both sides of 0.5;
    - ``obb``: the box's width and height shrunk by its scores, and an angle
      ``(sigmoid(z) - 1/4) pi`` (the reference head's range, -pi/4 to 3 pi/4) with ``z``
      a mix of the scores.

    The metadata is the source's with ``task`` (and ``kpt_shape``, ``kpt_names``) as
    Ultralytics writes them, so Ultralytics' ``predict`` runs the file as its own export.
    ``visibility_shift`` is added to every keypoint's visibility logit (the README's
    picture shows more keypoints). Deterministic: the same arguments give the same bytes.
    """
    model = onnx.load(str(source))
    graph = model.graph
    (out,) = graph.output
    channels = out.type.tensor_type.shape.dim[1].dim_value
    classes = channels - 4
    head = next(n for n in graph.node if "output0" in n.output)
    head.output[0] = "detector_rows"
    rng = np.random.default_rng(seed)
    consts: dict[str, np.ndarray] = {}

    def const(name: str, value: np.ndarray) -> str:
        consts[name] = np.asarray(value, dtype=np.float32)
        return name

    def slice_(name: str, start: int, stop: int) -> onnx.NodeProto:
        starts = numpy_helper.from_array(np.array([start], np.int64), f"{name}_starts")
        ends = numpy_helper.from_array(np.array([stop], np.int64), f"{name}_ends")
        axes = numpy_helper.from_array(np.array([1], np.int64), f"{name}_axes")
        graph.initializer.extend([starts, ends, axes])
        return helper.make_node(
            "Slice", ["detector_rows", starts.name, ends.name, axes.name], [name]
        )

    nodes = [slice_(n, i, i + 1) for i, n in enumerate(("cx", "cy", "w", "h"))]
    nodes.append(slice_("scores", 4, channels))
    node = helper.make_node
    if task == "pose":
        count = len(TASK_KEYPOINTS)
        base_x = np.array([0.0, -0.5, 0.5, 0.0, 0.0])[:, None]
        base_y = np.array([-0.5, 0.45, 0.45, 0.8, 0.0])[:, None]
        nodes += [
            node("MatMul", [const("mix_x", rng.uniform(-0.3, 0.3, (count, classes))), "scores"],
                 ["moved_x"]),
            node("Add", ["moved_x", const("base_x", base_x)], ["offset_x"]),
            node("Mul", ["offset_x", "w"], ["reach_x"]),
            node("Add", ["reach_x", "cx"], ["kx"]),
            node("MatMul", [const("mix_y", rng.uniform(-0.3, 0.3, (count, classes))), "scores"],
                 ["moved_y"]),
            node("Add", ["moved_y", const("base_y", base_y)], ["offset_y"]),
            node("Mul", ["offset_y", "h"], ["reach_y"]),
            node("Add", ["reach_y", "cy"], ["ky"]),
            node("MatMul", [const("pick", np.eye(count, classes, dtype=np.float32) * 6), "scores"],
                 ["sharp"]),
            node("Add", ["sharp", const("vis_bias", rng.uniform(-2.5, 0.5, (count, 1))
                                        + visibility_shift)],
                 ["vis_logit"]),
            node("Sigmoid", ["vis_logit"], ["kv"]),
        ]  # fmt: skip
        axis = numpy_helper.from_array(np.array([2], np.int64), "kpt_axis")
        flat = numpy_helper.from_array(np.array([0, 3 * count, -1], np.int64), "kpt_flat")
        graph.initializer.extend([axis, flat])
        nodes += [node("Unsqueeze", [f"k{v}", "kpt_axis"], [f"k{v}_3d"]) for v in "xyv"]
        nodes += [
            node("Concat", ["kx_3d", "ky_3d", "kv_3d"], ["kpt_grouped"], axis=2),
            node("Reshape", ["kpt_grouped", "kpt_flat"], ["keypoints"]),
            node("Concat", ["cx", "cy", "w", "h", "scores", "keypoints"], ["output0"], axis=1),
        ]
        added = {
            "kpt_shape": f"[{count}, 3]",
            "kpt_names": repr({0: list(TASK_KEYPOINTS)}),
        }
        extra = 3 * count
    elif task == "obb":
        nodes += [
            node("MatMul", [const("shrink_w", np.full((1, classes), 0.2)), "scores"], ["gw"]),
            node("Add", ["gw", const("base_w", np.full((1, 1), 0.75))], ["gain_w"]),
            node("Mul", ["w", "gain_w"], ["rw"]),
            node("MatMul", [const("shrink_h", np.full((1, classes), -0.3)), "scores"], ["gh"]),
            node("Add", ["gh", const("base_h", np.full((1, 1), 0.9))], ["gain_h"]),
            node("Mul", ["h", "gain_h"], ["rh"]),
            node("MatMul", [const("turn", rng.uniform(-4, 4, (1, classes))), "scores"], ["z"]),
            node("Sigmoid", ["z"], ["turned"]),
            node("Sub", ["turned", const("quarter", np.full((1, 1), 0.25))], ["angle_unit"]),
            node("Mul", ["angle_unit", const("pi", np.full((1, 1), np.pi))], ["angle"]),
            node("Concat", ["cx", "cy", "rw", "rh", "scores", "angle"], ["output0"], axis=1),
        ]
        added = {}
        extra = 1
    else:
        raise ValueError(f"task {task!r}: pose or obb")
    graph.node.extend(nodes)
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    out.type.tensor_type.shape.dim[1].dim_value = channels + extra
    metadata = {p.key: p.value for p in model.metadata_props}
    metadata.update(
        task=task,
        description=f"vstream parity {task} model: {source.name} with a {task} head computed "
        "from its rows (tests/onnx_models.py task_model)",
        **added,
    )
    del model.metadata_props[:]
    for key, value in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
