"""The naive baseline: a detection loop written the way most people write one.

Decode a frame (OpenCV's ``VideoCapture`` when ``cv2`` is installed, else
PyAV), letterbox it with numpy (``cv2.resize`` or FFmpeg's scaler for the
resize), hand a numpy array to ``session.run``, decode the YOLOv8 output and
run NMS in numpy; one frame after the other, on one thread. Nothing in it
comes from vstream's pipeline, on purpose: it is what the pipeline is
measured against. It reads YOLOv8-layout outputs only (``[1, 4 + nc, N]``), of a square
input; :func:`unfit` says, before anything runs, when a model is not one of those.

Also runnable as a process of its own, for whole-process comparisons::

    python -m vstream.bench.naive VIDEO MODEL --imgsz 320 [--threads N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import av
import numpy as np

from vstream.bench.measure import Measurement, Stopwatch
from vstream.errors import ModelError
from vstream.inference.wheels import load_onnxruntime

if TYPE_CHECKING:
    from vstream.detector import Detector

PAD = 114


def has_opencv() -> bool:
    return importlib.util.find_spec("cv2") is not None


def opencv_frames(video: Path) -> Iterator[np.ndarray]:
    """RGB frames from OpenCV (which decodes BGR), one by one."""
    import cv2

    capture = cv2.VideoCapture(str(video))
    try:
        while True:
            ok, bgr = capture.read()
            if not ok:
                return
            yield cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    finally:
        capture.release()


def pyav_frames(video: Path) -> Iterator[av.VideoFrame]:
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        yield from container.decode(stream)


def letterbox(image: np.ndarray, size: int) -> tuple[np.ndarray, float, tuple[int, int]]:
    """Resize keeping the aspect ratio, pad with grey: ``(1, 3, size, size)`` float32 in 0..1."""
    import cv2

    height, width = image.shape[:2]
    gain = min(size / height, size / width)
    new_w, new_h = round(width * gain), round(height * gain)
    resized = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    return pad_to_square(resized, size, gain)


def pad_to_square(
    resized: np.ndarray, size: int, gain: float
) -> tuple[np.ndarray, float, tuple[int, int]]:
    new_h, new_w = resized.shape[:2]
    left, top = (size - new_w) // 2, (size - new_h) // 2
    canvas = np.full((size, size, 3), PAD, dtype=np.uint8)
    canvas[top : top + new_h, left : left + new_w] = resized
    blob = canvas.transpose(2, 0, 1)[None].astype(np.float32) / 255.0
    return np.ascontiguousarray(blob), gain, (left, top)


def pyav_letterbox(
    frame: av.VideoFrame, size: int
) -> tuple[np.ndarray, float, tuple[int, int], tuple[int, int]]:
    """The same letterbox with FFmpeg's scaler doing the resize; also the frame's size."""
    gain = min(size / frame.height, size / frame.width)
    new_w, new_h = round(frame.width * gain), round(frame.height * gain)
    resized = frame.to_ndarray(width=new_w, height=new_h, format="rgb24")
    return (*pad_to_square(resized, size, gain), (frame.width, frame.height))


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> list[int]:
    """Greedy non-maximum suppression: indices of the boxes kept, best first."""
    order = scores.argsort()[::-1]
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep = []
    while order.size:
        best, rest = order[0], order[1:]
        keep.append(int(best))
        x1 = np.maximum(boxes[best, 0], boxes[rest, 0])
        y1 = np.maximum(boxes[best, 1], boxes[rest, 1])
        x2 = np.minimum(boxes[best, 2], boxes[rest, 2])
        y2 = np.minimum(boxes[best, 3], boxes[rest, 3])
        overlap = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
        order = rest[overlap / (areas[best] + areas[rest] - overlap + 1e-9) <= iou]
    return keep


def decode_output(
    output: np.ndarray,
    gain: float,
    pad: tuple[int, int],
    frame_size: tuple[int, int],
    conf: float = 0.25,
    iou: float = 0.45,
) -> list[tuple[float, float, float, float, float, int]]:
    """``(x1, y1, x2, y2, score, class)`` in frame pixels from a ``[1, 4 + nc, N]`` output."""
    # In float32: a float16 output would overflow with the class offsets below.
    rows = output[0].T.astype(np.float32, copy=False)
    scores = rows[:, 4:].max(axis=1)
    keep = scores > conf
    rows, scores = rows[keep], scores[keep]
    if not len(rows):
        return []
    classes = rows[:, 4:].argmax(axis=1)
    cx, cy, w, h = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    offsets = classes[:, None] * 4096.0  # one NMS over all classes, kept apart by class
    kept = nms(boxes + offsets, scores, iou)[:300]
    boxes = (boxes[kept] - [pad[0], pad[1], pad[0], pad[1]]) / gain
    width, height = frame_size
    boxes = boxes.clip(0, [width, height, width, height])
    return [
        (*map(float, box), float(score), int(cls))
        for box, score, cls in zip(boxes, scores[kept], classes[kept], strict=True)
    ]


def session_for(model: Path, threads: int) -> Any:
    """An ONNX Runtime CPU session as people usually make one, with the thread count given."""
    ort = load_onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(
        str(model), sess_options=options, providers=["CPUExecutionProvider"]
    )


def unfit(detector: Detector) -> str | None:
    """Why the naive loop cannot run ``detector``'s model, in words, or None where it can.

    Asked before the bench measures anything, so that a model of another family costs
    the naive row only, said in one line, not every figure of the run.
    """
    from vstream.postprocess.formats import OutputFormat
    from vstream.postprocess.tasks import Task

    task, output_format = detector.task.task, detector.output_format
    name = detector.model.spec.path.name
    if task is not Task.DETECT or output_format is not OutputFormat.YOLOV8:
        return (
            f"it reads YOLOv8 detection outputs [1, 4+nc, N]; {name} is a {task.value} "
            f"model of format {output_format.value}"
        )
    height, width = detector.model.input_size
    if height != width:
        return f"it letterboxes to a square input; {name} takes {width}x{height}"
    return None


def check_yolov8(output: np.ndarray) -> None:
    if output.ndim != 3 or not 5 <= output.shape[1] < output.shape[2]:
        raise ModelError(
            f"the naive baseline reads YOLOv8 outputs [1, 4+nc, N]; got {list(output.shape)}"
        )


def run_naive(
    video: Path, model: Path, imgsz: int, threads: int, frames: int | None
) -> Measurement:
    """Every frame (up to ``frames``) through the loop; latency from decoded frame to boxes."""
    session = session_for(model, threads)
    model_input = session.get_inputs()[0]
    name = model_input.name
    dtype = np.float16 if model_input.type == "tensor(float16)" else np.float32
    opencv = has_opencv()
    decoded: Iterator[Any] = opencv_frames(video) if opencv else pyav_frames(video)
    latencies: list[float] = []
    detections = 0
    input_bytes = output_bytes = 0
    watch = Stopwatch().start()
    for image in decoded:
        if frames is not None and len(latencies) >= frames:
            break
        started = time.perf_counter()
        if opencv:
            blob, gain, pad = letterbox(image, imgsz)
            size = (image.shape[1], image.shape[0])
        else:
            blob, gain, pad, size = pyav_letterbox(image, imgsz)
        blob = blob.astype(dtype, copy=False)  # a float16 model takes float16
        (output,) = session.run(None, {name: blob})
        if not latencies:
            check_yolov8(output)
        detections += len(decode_output(output, gain, pad, size))
        input_bytes += blob.nbytes
        output_bytes += output.nbytes
        latencies.append(time.perf_counter() - started)
    watch.stop()
    count = max(len(latencies), 1)
    return watch.measurement(
        len(latencies),
        latencies,
        decoder="opencv" if opencv else "pyav",
        detections=detections,
        device_bytes_per_frame=round((input_bytes + output_bytes) / count),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="The naive detection loop, as a process.")
    parser.add_argument("video", type=Path)
    parser.add_argument("model", type=Path)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    result = run_naive(args.video, args.model, args.imgsz, args.threads, None)
    print(json.dumps({"frames": result.frames, "detections": result.extra["detections"]}))


if __name__ == "__main__":
    main()
