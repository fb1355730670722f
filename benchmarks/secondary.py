"""What a cascade costs: a secondary classifier per object and per frame, with and without caching.

Runs the demo colour classifier (``vstream/assets/colour.onnx``, 32x32 crops)
as :class:`vstream.cascade.SecondaryModel` on a 1280x720 RGB frame on the CPU,
with 5, 20 and 50 objects per frame (boxes 40 to 160 px), two ways, side by
side in each repeat so that the load of a shared machine falls on both alike:

- ``every frame``: every object read in every frame (no tracking, or
  ``reinfer_seconds: 0``);
- ``cached``: the same objects as stable tracks at 25 fps through
  :class:`vstream.cascade.AttributeCache` with ``reinfer_seconds`` 1 (the
  default): a track is read again once a second, so about one frame in 25
  reads, staggered as tracks start at different times.

Each figure is the median over the repeats of the mean over ``--frames``
frames; a frame's time is the whole call, the crop of the full frame included.

    .venv/bin/python benchmarks/secondary.py [--frames 50] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from vstream.assets import ASSETS_DIR
from vstream.cascade import AttributeCache, SecondaryModel
from vstream.config.secondary import SecondaryConfig
from vstream.frame import Frame, PixelFormat

WIDTH, HEIGHT, FPS = 1280, 720, 25.0


def scene(objects: int, rng: np.random.Generator) -> tuple[Frame, np.ndarray]:
    picture = rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    sizes = rng.uniform(40, 160, (objects, 2))
    corners = rng.uniform(0, 1, (objects, 2)) * ([WIDTH, HEIGHT] - sizes)
    boxes = np.concatenate([corners, corners + sizes], axis=1).astype(np.float32)
    return Frame(torch.from_numpy(picture), PixelFormat.RGB24, WIDTH, HEIGHT), boxes


def every_frame(model: SecondaryModel, frame: Frame, boxes: np.ndarray, frames: int) -> float:
    start = time.perf_counter()
    for _ in range(frames):
        model.run(frame, boxes)
    return (time.perf_counter() - start) / frames


def cached(model: SecondaryModel, frame: Frame, boxes: np.ndarray, frames: int) -> float:
    cache = AttributeCache(reinfer_seconds=1.0, regrow=2.0)
    tracks = np.arange(1, len(boxes) + 1)
    selected = np.ones(len(boxes), dtype=bool)
    # Tracks that started at different times fall due at different frames.
    offsets = np.linspace(0, 1, len(boxes), endpoint=False)
    for track, offset in zip(tracks, offsets, strict=True):
        cache.resolve(np.array([track]), boxes[track - 1 : track], -offset, selected[:1],
                      lambda rows: model.run(frame, boxes[:1][rows]))  # fmt: skip
    start = time.perf_counter()
    for index in range(frames):
        cache.resolve(tracks, boxes, index / FPS, selected,
                      lambda rows: model.run(frame, boxes[rows]))  # fmt: skip
    return (time.perf_counter() - start) / frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime and torch threads")
    parser.add_argument("--objects", type=int, nargs="+", default=[5, 20, 50])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = SecondaryConfig(name="colour", path=str(ASSETS_DIR / "colour.onnx"))
    model = SecondaryModel(config, intra_op_threads=args.threads)
    rng = np.random.default_rng(0)
    print(f"colour.onnx, {model.spec.input_size[1]}x{model.spec.input_size[0]} crops, "
          f"max_batch {model.max_batch}, {WIDTH}x{HEIGHT} RGB frame, cpu, {args.threads} "
          f"thread(s), {args.frames} frames x {args.repeats} repeats")  # fmt: skip
    print("objects | every frame: ms/frame  ms/object | cached: ms/frame  ms/object | saving")
    for objects in args.objects:
        frame, boxes = scene(objects, rng)
        every_frame(model, frame, boxes, 3)  # warm-up: the buckets' first runs
        plain, kept = [], []
        for _ in range(args.repeats):
            plain.append(every_frame(model, frame, boxes, args.frames))
            kept.append(cached(model, frame, boxes, args.frames))
        a, b = statistics.median(plain) * 1e3, statistics.median(kept) * 1e3
        print(f"{objects:7d} | {a:21.2f} {a / objects:10.3f} | {b:16.2f} {b / objects:10.3f} "
              f"| {a / b:5.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
