"""Cost per frame of instance masks over plain boxes, and the bytes they cost, on the CPU.

Two constant ONNX models with YOLOv8-seg's layout at 640 (80 classes, 32
prototypes ``[1, 32, 160, 160]``, 8,400 rows) hold the same ``K`` boxes
(5, 20, 50; 96 x 160 px person-sized objects on a 1280 x 720 frame) and
smooth random prototypes (blob-shaped masks): one read as a segmentation
model, one with the prototypes dropped and ``task: detect``. Measured per
frame, on the model's outputs as they come from the run (the run itself is
left out: it is the same model):

- ``postprocess``: :meth:`vstream.Detector.postprocess` (decode, NMS, the
  copy to the host; with masks: the masks on the device, their copy, the
  :class:`~vstream.masks.Mask` objects), process CPU time;
- ``records``: turning the frame's detections into JSON records, per
  ``mask_format`` (``rle``, ``polygon``), CPU time;
- ``draw``: :meth:`vstream.annotate.Annotator.draw` of the frame, masks
  filled (``mask_alpha`` 0.45) and not (0);
- bytes that leave the device per frame (:data:`vstream.transfer.transfers`)
  and the size of the frame's detections in the records, per format.

Run from the repository root (``--repeat`` frames per figure, median)::

    .venv/bin/python benchmarks/masks.py [--repeat 30]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

from vstream import Detector, Frame, PixelFormat
from vstream.annotate import Annotator
from vstream.transfer import transfers

WIDTH, HEIGHT, IMGSZ, CLASSES, PROTOS = 1280, 720, 640, 80, 32
BOX = (96, 160)
"""(width, height) of every object in frame pixels."""


def outputs(count: int) -> tuple[np.ndarray, np.ndarray]:
    """``output0`` ``[1, 4+80+32, 8400]`` with ``count`` separated boxes, and the prototypes."""
    rng = np.random.default_rng(0)
    rows = np.zeros((1, 4 + CLASSES + PROTOS, 8400), np.float32)
    gain = IMGSZ / WIDTH
    pad = (IMGSZ - HEIGHT * gain) / 2
    columns = 10
    for k in range(count):
        cx = (k % columns + 0.5) * WIDTH / columns
        cy = (k // columns + 0.5) * BOX[1] * 1.1
        rows[0, :4, k] = [cx * gain, cy * gain + pad, BOX[0] * gain, BOX[1] * gain]
        rows[0, 4 + k % CLASSES, k] = 0.9
        rows[0, 4 + CLASSES :, k] = rng.normal(0, 1, PROTOS)
    coarse = torch.from_numpy(rng.normal(0, 1, (1, PROTOS, 10, 10)).astype(np.float32))
    protos = F.interpolate(coarse, (IMGSZ // 4, IMGSZ // 4), mode="bicubic").numpy()
    return rows, protos


def model(path: Path, values: dict[str, np.ndarray], task: str) -> Path:
    """A model whose outputs are ``values`` whatever the image (plus 0 * sum(image))."""
    nodes = [
        helper.make_node("ReduceSum", ["images"], ["total"], keepdims=0),
        helper.make_node("Mul", ["total", "zero"], ["nothing"]),
    ]
    initializers = [numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    for name, value in values.items():
        initializers.append(numpy_helper.from_array(value, f"{name}_value"))
        nodes.append(helper.make_node("Add", [f"{name}_value", "nothing"], [name]))
    graph = helper.make_graph(
        nodes,
        "constant",
        [helper.make_tensor_value_info("images", onnx.TensorProto.FLOAT, [1, 3, IMGSZ, IMGSZ])],
        [
            helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, v.shape)
            for n, v in values.items()
        ],
        initializer=initializers,
    )
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    made.ir_version = 8
    for key, value in {"task": task, "names": str({i: f"c{i}" for i in range(CLASSES)})}.items():
        entry = made.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(made, str(path))
    return path


def cpu_median(action, repeat: int) -> float:
    """Median process CPU time of ``action()`` in milliseconds."""
    times = []
    for _ in range(repeat):
        started = time.process_time()
        action()
        times.append(time.process_time() - started)
    return 1000 * float(np.median(times))


def measure(count: int, repeat: int, work: Path) -> dict[str, float]:
    rows, protos = outputs(count)
    seg = Detector(model(work / "seg.onnx", {"output0": rows, "output1": protos}, "segment"))
    plain_rows = np.ascontiguousarray(rows[:, : 4 + CLASSES])
    plain = Detector(model(work / "det.onnx", {"output0": plain_rows}, "detect"))
    frame = Frame(
        torch.full((HEIGHT, WIDTH, 3), 90, dtype=torch.uint8), PixelFormat.RGB24, WIDTH, HEIGHT
    )
    figures: dict[str, float] = {}
    for name, detector in (("boxes", plain), ("masks", seg)):
        geometries = detector.preprocess_batch(0, [frame])
        raw = detector.infer(0, 1)
        (result,) = detector.postprocess(raw, geometries, [frame])
        assert len(result.detections) == count, (name, len(result.detections))
        figures[f"{name}_postprocess_ms"] = cpu_median(
            lambda d=detector, r=raw, g=geometries: d.postprocess(r, g, [frame]), repeat
        )
        before = transfers.snapshot()[0]
        detector.postprocess(raw, geometries, [frame])
        figures[f"{name}_device_bytes"] = transfers.snapshot()[0] - before
        for alpha in (0.0, 0.45) if name == "masks" else (0.0,):
            annotator = Annotator(mask_alpha=alpha)
            image = torch.full((HEIGHT, WIDTH, 3), 90, dtype=torch.uint8)
            figures[f"{name}_draw_alpha{alpha}_ms"] = cpu_median(
                lambda a=annotator, i=image, r=result: a.draw(i, r), repeat
            )
        if name == "boxes":
            figures["boxes_record_bytes"] = len(json.dumps(result.to_record()["detections"]))
            figures["boxes_records_ms"] = cpu_median(lambda r=result: r.to_record(), repeat)
    for mask_format in ("rle", "polygon"):
        detector = Detector(work / "seg.onnx", mask_format=mask_format)
        geometries = detector.preprocess_batch(0, [frame])
        (result,) = detector.postprocess(detector.infer(0, 1), geometries, [frame])
        figures[f"{mask_format}_record_bytes"] = len(json.dumps(result.to_record()["detections"]))
        figures[f"{mask_format}_records_ms"] = cpu_median(lambda r=result: r.to_record(), repeat)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"load average {os.getloadavg()[0]:.1f}; torch threads {args.threads}")
    with tempfile.TemporaryDirectory(prefix="masks-bench-") as tmp:
        for count in (5, 20, 50):
            figures = measure(count, args.repeat, Path(tmp))
            print(json.dumps({"objects": count, **{k: round(v, 3) for k, v in figures.items()}}))


if __name__ == "__main__":
    main()
