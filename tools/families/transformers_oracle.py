"""transformers' own post-processing as the oracle for vstream's DETR-family decoding.

Builds four small ONNX detectors with the interface of a Hugging Face folder
(``model.onnx`` taking ``pixel_values``, ``config.json`` with ``id2label``,
``preprocessor_config.json``), one per way transformers reads a DETR's
outputs:

- ``detr``: DETR (``DetrImageProcessor``): ``logits`` with a last "no object"
  column, softmax, one class per query; ImageNet mean and std.
- ``rt_detr``: RT-DETR (``RTDetrImageProcessor``): sigmoid, the top-k over
  queries x classes; values only rescaled to 0..1.
- ``d_fine``: D-FINE, which transformers reads with RT-DETR's processor.
- ``rf_detr``: RF-DETR (``RfDetrImageProcessor``): sigmoid, top-k over queries
  x classes, ImageNet mean and std; outputs named as the ``rfdetr`` package
  exports them (``dets``, ``labels``).

Each graph pools the picture into 2 x 2 cells per channel and maps those 12
numbers through random heads to ``Q`` boxes and class logits whose scores
spread (many between 0.25 and 0.9, some queries above the threshold for two
classes): the answers change with the picture and with its preprocessing.

For the first frames of a parity video (decoded to RGB by PyAV, as vstream's
CPU path does), transformers' image processor (loaded from the folder) makes
``pixel_values``, ONNX Runtime runs the graph, and the processor's
``post_process_object_detection`` (threshold 0.3, boxes in frame pixels) gives
the reference. vstream runs the same folder on the same video; the two are
scored by :func:`vstream.parity.agreement` (same class, IoU >= 0.85). The
reference boxes are clipped to the frame, as vstream clips every family's
(transformers does not). ``--write`` stores the folders and the answers under
``tests/data/families/`` for ``tests/test_transformers_parity.py``, which needs
no transformers. Run it with an environment holding transformers (an oracle
only, never a vstream dependency)::

    python3 -m venv /work/oracles/families && /work/oracles/families/bin/pip install transformers
    # torch, onnxruntime, PyAV and vstream's own dependencies from the project's .venv:
    echo $PWD/.venv/lib/python3.11/site-packages > \\
        /work/oracles/families/lib/python3.11/site-packages/project.pth
    PYTHONPATH=$PWD /work/oracles/families/bin/python tools/families/transformers_oracle.py --write
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "families"
VIDEO = ROOT / "vstream" / "assets" / "parity" / "landscape_854x480.mp4"
THRESHOLD = 0.3
QUERIES = 100
SIZE = 320
NAMES = ("disc", "square", "triangle", "cross")
IMAGENET = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}

# name: (processor config, output names (boxes, logits), no-object column, seed)
FAMILIES: dict[str, tuple[dict[str, Any], tuple[str, str], bool, int]] = {
    "detr": (
        {"image_processor_type": "DetrImageProcessor", **IMAGENET},
        ("pred_boxes", "logits"),
        True,
        1,
    ),
    "rt_detr": (
        {"image_processor_type": "RTDetrImageProcessor", "do_normalize": False},
        ("pred_boxes", "logits"),
        False,
        2,
    ),
    "d_fine": (
        {"image_processor_type": "RTDetrImageProcessor", "do_normalize": False},
        ("pred_boxes", "logits"),
        False,
        3,
    ),
    "rf_detr": (
        {"image_processor_type": "RfDetrImageProcessor", **IMAGENET},
        ("dets", "labels"),
        False,
        4,
    ),
}


def processor_config(extra: dict[str, Any]) -> dict[str, Any]:
    """A processor config as the Hub stores one: every step spelled out."""
    base = {
        "do_resize": True,
        "size": {"height": SIZE, "width": SIZE},
        "resample": 2,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "do_pad": False,
        "format": "coco_detection",
    }
    return {**base, **extra}


def build_graph(path: Path, names: tuple[str, str], no_object: bool, seed: int) -> None:
    """``pixel_values`` [B, 3, SIZE, SIZE] -> boxes [B, Q, 4] (sigmoid cx cy w h) and logits
    [B, Q, nc (+1)] through 2 x 2 average pooling and two random linear heads."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    classes = len(NAMES) + no_object
    features = 12
    w_logits = rng.normal(0, 1.0, (features, QUERIES * classes)).astype(np.float32)
    b_logits = rng.normal(-3.4, 1.0, QUERIES * classes).astype(np.float32)
    if no_object:  # DETR: most queries find nothing (the last column wins)
        b_logits.reshape(QUERIES, classes)[:, -1] += 3.4
    w_boxes = rng.normal(0, 0.3, (features, QUERIES * 4)).astype(np.float32)
    b_boxes = np.tile(np.array([0.0, 0.0, -1.6, -1.6], np.float32), QUERIES)
    b_boxes += rng.normal(0, 1.0, QUERIES * 4).astype(np.float32) * np.tile(
        [1, 1, 0.4, 0.4], QUERIES
    )
    boxes, logits = names
    half = SIZE // 2
    nodes = [
        helper.make_node(
            "AveragePool",
            ["pixel_values"],
            ["cells"],
            kernel_shape=[half, half],
            strides=[half, half],
        ),
        helper.make_node("Flatten", ["cells"], ["features"], axis=1),
        helper.make_node("Gemm", ["features", "w_logits", "b_logits"], ["flat_logits"]),
        helper.make_node("Reshape", ["flat_logits", "logits_shape"], [logits]),
        helper.make_node("Gemm", ["features", "w_boxes", "b_boxes"], ["flat_boxes"]),
        helper.make_node("Sigmoid", ["flat_boxes"], ["unit_boxes"]),
        helper.make_node("Reshape", ["unit_boxes", "boxes_shape"], [boxes]),
    ]
    initializers = [
        numpy_helper.from_array(w_logits, "w_logits"),
        numpy_helper.from_array(b_logits, "b_logits"),
        numpy_helper.from_array(w_boxes, "w_boxes"),
        numpy_helper.from_array(b_boxes, "b_boxes"),
        numpy_helper.from_array(np.array([-1, QUERIES, classes], np.int64), "logits_shape"),
        numpy_helper.from_array(np.array([-1, QUERIES, 4], np.int64), "boxes_shape"),
    ]
    graph = helper.make_graph(
        nodes,
        "detr_like",
        [
            helper.make_tensor_value_info(
                "pixel_values", TensorProto.FLOAT, ["batch", 3, SIZE, SIZE]
            )
        ],
        [
            helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", QUERIES, classes]),
            helper.make_tensor_value_info(boxes, TensorProto.FLOAT, ["batch", QUERIES, 4]),
        ],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def make_folder(folder: Path, name: str) -> Path:
    """The Hugging Face folder of family ``name``: model.onnx, config.json, preprocessor config."""
    extra, names, no_object, seed = FAMILIES[name]
    folder.mkdir(parents=True, exist_ok=True)
    build_graph(folder / "model.onnx", names, no_object, seed)
    config = {"model_type": name, "id2label": {str(i): n for i, n in enumerate(NAMES)}}
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (folder / "preprocessor_config.json").write_text(
        json.dumps(processor_config(extra), indent=1) + "\n"
    )
    return folder / "model.onnx"


def frames(count: int) -> list[np.ndarray]:
    """The video's first ``count`` pictures as RGB, converted by FFmpeg (PyAV)."""
    import av

    with av.open(str(VIDEO)) as container:
        decoded = (f.to_ndarray(format="rgb24") for f in container.decode(video=0))
        return [next(decoded) for _ in range(count)]


def reference(folder: Path, name: str, pictures: list[np.ndarray]) -> tuple[list[list[dict]], str]:
    """transformers' answers on ``pictures``: its processor, the graph, its post-processing."""
    import onnxruntime as ort
    import torch
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(str(folder))
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    boxes_name, logits_name = FAMILIES[name][1]
    answers = []
    for picture in pictures:
        pixels = processor(images=[picture], return_tensors="pt")["pixel_values"].numpy()
        out = dict(
            zip(
                [o.name for o in session.get_outputs()],
                session.run(None, {"pixel_values": pixels}),
                strict=True,
            )
        )
        outputs = SimpleNamespace(
            logits=torch.from_numpy(out[logits_name]), pred_boxes=torch.from_numpy(out[boxes_name])
        )
        height, width = picture.shape[:2]
        (found,) = processor.post_process_object_detection(
            outputs, threshold=THRESHOLD, target_sizes=[(height, width)]
        )
        boxes = found["boxes"].clone()
        boxes[:, 0::2] = boxes[:, 0::2].clamp(0, width)
        boxes[:, 1::2] = boxes[:, 1::2].clamp(0, height)
        answers.append(
            [
                {"bbox": [round(v, 3) for v in box], "score": round(score, 6), "class_id": label}
                for box, score, label in zip(
                    boxes.tolist(), found["scores"].tolist(), found["labels"].tolist(), strict=True
                )
            ]
        )
    return answers, type(processor).__name__


def vstream_answers(model: Path, count: int) -> list[list[dict]]:
    from vstream.api import detect

    results = detect(
        VIDEO, model=model, conf=THRESHOLD, max_det=QUERIES, device="cpu", end_seconds=count / 25
    )
    return [
        [{"bbox": d.bbox, "class_id": d.class_id, "score": d.score} for d in result.detections]
        for result in results
    ]


def write_answers(path: Path, header: dict[str, Any], frames: list[list[dict]]) -> None:
    """``header`` and ``frames`` as one JSON object, a frame a line (diffs stay readable)."""
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in header.items()]
    body = ",\n".join(json.dumps(frame) for frame in frames)
    path.write_text("{\n" + "\n".join(lines) + '\n "frames": [\n' + body + "\n ]\n}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument(
        "--write", action="store_true", help=f"store folders and answers in {FIXTURES}"
    )
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/transformers_oracle"))
    args = parser.parse_args()
    try:
        import transformers
    except ImportError:
        sys.exit("transformers is not installed here: see this script's docstring")
    from vstream.parity import agreement

    pictures = frames(args.frames)
    failed = False
    for name in FAMILIES:
        folder = (FIXTURES if args.write else args.work_dir) / name
        shutil.rmtree(folder, ignore_errors=True)
        model = make_folder(folder, name)
        theirs, processor = reference(folder, name, pictures)
        ours = vstream_answers(model, args.frames)
        score = agreement(ours, theirs)
        scores = np.array([d["score"] for frame in theirs for d in frame])
        two = sum(
            len({d["class_id"] for d in frame if d["bbox"] == box["bbox"]}) > 1
            for frame in theirs
            for box in frame
        )
        per_frame = len(scores) / len(theirs)
        print(
            f"{name}: {processor}, {len(scores)} reference boxes ({per_frame:.0f} a frame), "
            f"scores 5/50/95% {np.percentile(scores, [5, 50, 95]).round(2).tolist()}, "
            f"{two} boxes sharing a query with another class; vstream: {score}",
            flush=True,
        )
        failed |= not score.met
        if args.write:
            header = {
                "tool": "tools/families/transformers_oracle.py: post_process_object_detection",
                "versions": {"transformers": transformers.__version__},
                "processor": processor,
                "video": VIDEO.name,
                "threshold": THRESHOLD,
                "max_det": QUERIES,
            }
            write_answers(folder / "transformers.json", header, theirs)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
