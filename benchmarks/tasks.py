"""CPU cost per frame of keypoints and oriented boxes over plain boxes, and bytes off the device.

A model's raw output, made up: a 640 input's 8,400 rows (Ultralytics' layout,
80 classes), ``objects`` objects each scored by 3 neighbouring rows (so NMS has
something to suppress) and every other row below ``conf``; the same rows as a
detector's ``[1, 84, 8400]``, a pose model's ``[1, 84 + 51, 8400]`` (17
keypoints) and an OBB model's ``[1, 85, 8400]``. Timed per frame, CPU time of
this thread (``time.thread_time``): what vstream does after the model: the
postprocess (threshold, NMS, mapping to frame pixels, the copy to the host;
on a CPU that copy is a view) and the host's records (``Detections`` per frame
and their JSON records); the model run itself is the model's and not counted.
``bytes`` is what :func:`vstream.transfer.to_host` handed over for the frame.
Rounds alternate between the tasks so drift in the machine's speed falls on
all of them. Run from the repository root::

    .venv/bin/python benchmarks/tasks.py [--objects 5 20 50] [--frames 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from vstream.config.model import PostprocessOptions
from vstream.frame import Frame, PixelFormat
from vstream.postprocess.decode import Postprocessor
from vstream.postprocess.formats import OutputFormat
from vstream.postprocess.tasks import DETECTION, Task, TaskSpec
from vstream.preprocess import LetterboxGeometry
from vstream.results import split_by_frame
from vstream.transfer import to_host, transfers

ROWS, CLASSES, KEYPOINTS = 8400, 80, 17
TASKS = {
    "boxes": DETECTION,
    "keypoints": TaskSpec(Task.POSE, extra=KEYPOINTS * 3, keypoints=(KEYPOINTS, 3)),
    "oriented": TaskSpec(Task.OBB, extra=1),
}


def raw_output(task: str, objects: int, seed: int = 0) -> torch.Tensor:
    """``[1, 4 + nc + extra, 8400]``: ``objects`` objects of 3 rows each above conf."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.zeros((ROWS, 4 + CLASSES), dtype=torch.float32)
    rows[:, 4:] = torch.rand((ROWS, CLASSES), generator=generator) * 0.05
    for index in range(objects):
        cx, cy = 40 + (index % 10) * 60, 40 + (index // 10) * 110
        for copy in range(3):
            row = index * 3 + copy
            rows[row, :4] = torch.tensor([cx + copy, cy + copy, 40.0, 90.0])
            rows[row, 4 + index % CLASSES] = 0.9 - 0.1 * copy
    if task == "keypoints":
        points = torch.rand((ROWS, KEYPOINTS, 3), generator=generator)
        points[..., :2] = rows[:, None, :2] + (points[..., :2] - 0.5) * 40
        rows = torch.cat([rows, points.reshape(ROWS, -1)], dim=1)
    elif task == "oriented":
        angle = torch.rand((ROWS, 1), generator=generator) * 0.3
        rows = torch.cat([rows, angle], dim=1)
    return rows.T[None].contiguous()


def per_frame(task: str, objects: int, frames: int) -> tuple[float, float]:
    """CPU microseconds and bytes handed to the host, per frame, over ``frames`` frames."""
    post = Postprocessor(
        OutputFormat.YOLOV8, PostprocessOptions(), torch.device("cpu"), (640, 640), task=TASKS[task]
    )
    raw = raw_output(task, objects)
    geometry = [LetterboxGeometry.fit(1280, 720, 640, 640, "letterbox")]
    frame = Frame(torch.zeros((720, 1280, 3), dtype=torch.uint8), PixelFormat.RGB24, 1280, 720)
    spec = TASKS[task]
    before = transfers.snapshot()[0]
    start = time.thread_time()
    for _ in range(frames):
        host = to_host(post([raw], geometry))
        (result,) = split_by_frame(host, [frame], {}, spec.keypoints, spec.task is Task.OBB)
        result.detections.records()
        assert len(result.detections) == objects, (task, len(result.detections))
    spent = (time.thread_time() - start) / frames
    return spent * 1e6, (transfers.snapshot()[0] - before) / frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, nargs="+", default=[5, 20, 50])
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {}
    for objects in args.objects:
        times: dict[str, list[float]] = {task: [] for task in TASKS}
        sizes: dict[str, float] = {}
        for _ in range(args.rounds):
            for task in TASKS:
                micros, nbytes = per_frame(task, objects, args.frames)
                times[task].append(micros)
                sizes[task] = nbytes
        base = statistics.median(times["boxes"])
        for task in TASKS:
            median = statistics.median(times[task])
            results[f"{task} x{objects}"] = {
                "us_per_frame": round(median),
                "over_boxes_us": round(median - base),
                "bytes_per_frame": round(sizes[task]),
            }
            print(
                f"{objects:3d} objects  {task:10s} {median:8.0f} us/frame "
                f"({median - base:+6.0f} over boxes), {sizes[task]:6.0f} bytes to the host",
                flush=True,
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
