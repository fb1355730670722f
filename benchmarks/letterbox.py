"""CPU cost of one frame into the model input, each way of making it, side by side in one run.

For every decoded picture of a video (PyAV, FFmpeg's memory), the CPU time of
this thread (``time.thread_time``: what the work costs, whatever else the
machine runs) to fill a letterbox window of the model input:

- ``vstream linear``: the default, the reference's pixels (``resample.py``);
- ``vstream area``: the ``resize: area`` opt-in (FFmpeg's area scaler);
- ``vstream NV12 tensor``: the path NVDEC frames take (``resample.py``), here
  on the CPU, from NV12 tensors converted beforehand (not timed);
- ``full RGB + torch``: FFmpeg's RGB at full size, torch's bilinear on uint8;
- ``full RGB + OpenCV`` (with ``opencv-python-headless``): the reference itself.

Rounds alternate between the methods so that drift in the machine's speed
falls on all of them. Run from the repository root::

    .venv/bin/python benchmarks/make_video.py   # the 720p clip it reads by default
    .venv/bin/python benchmarks/letterbox.py [--video V] [--imgsz 320] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from vstream.frame import Frame, PixelFormat
from vstream.preprocess import Letterboxer, LetterboxGeometry
from vstream.sources import VideoFileSource

DEFAULT_VIDEO = Path(__file__).resolve().parent / "generated" / "720p.mp4"


def methods(frames: list[Frame], size: int) -> dict[str, Callable[[Frame], None]]:
    linear = Letterboxer(torch.zeros((1, 3, size, size)))
    area = Letterboxer(torch.zeros((1, 3, size, size)), resize="area")
    window = torch.zeros((3, size, size))
    geometry = LetterboxGeometry.fit(frames[0].width, frames[0].height, size, size)
    shape = (geometry.resized_height, geometry.resized_width)
    target = window[:, : shape[0], : shape[1]]

    def full_torch(frame: Frame) -> None:
        rgb = torch.from_numpy(frame.picture.frame.to_ndarray(format="rgb24", threads=1))
        image = F.interpolate(rgb.permute(2, 0, 1)[None], size=shape, mode="bilinear")
        torch.div(image[0], 255, out=target)

    nv12 = {
        id(frame): Frame(
            torch.from_numpy(frame.picture.frame.to_ndarray(format="nv12")),
            PixelFormat.NV12,
            frame.width,
            frame.height,
            colour=frame.colour,
        )
        for frame in frames
    }
    found = {
        "vstream linear": lambda frame: linear.load(0, frame) and None,
        "vstream area": lambda frame: area.load(0, frame) and None,
        "vstream NV12 tensor": lambda frame: linear.load(0, nv12[id(frame)]) and None,
        "full RGB + torch": full_torch,
    }
    try:
        import cv2
    except ImportError:
        return found
    cv2.setNumThreads(1)  # the CPU time measured is this thread's, as for the others

    def full_opencv(frame: Frame) -> None:
        rgb = frame.picture.frame.to_ndarray(format="rgb24", threads=1)
        image = cv2.resize(rgb, shape[::-1], interpolation=cv2.INTER_LINEAR)
        torch.div(torch.from_numpy(image).permute(2, 0, 1), 255, out=target)

    found["full RGB + OpenCV"] = full_opencv
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--video",
        type=Path,
        default=DEFAULT_VIDEO,
        help="default: the 720p clip benchmarks/make_video.py writes",
    )
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not args.video.is_file():
        parser.error(f"{args.video} not found: make it with benchmarks/make_video.py, or --video")
    torch.set_num_threads(1)
    with VideoFileSource(args.video) as source:
        frames = list(itertools.islice(source, args.frames))
    found = methods(frames, args.imgsz)
    for work in found.values():  # warm-up: plans, scaler contexts, padding painted
        for frame in frames[:3]:
            work(frame)
    costs: dict[str, list[float]] = {name: [] for name in found}
    for _ in range(args.rounds):
        for name, work in found.items():
            started = time.thread_time()
            for frame in frames:
                work(frame)
            costs[name].append((time.thread_time() - started) / len(frames) * 1e3)
    first = frames[0]
    size = f"{first.width}x{first.height} -> imgsz {args.imgsz}"
    runs = f"{len(frames)} frames x {args.rounds} rounds"
    print(f"{args.video.name}: {size}, {runs}, CPU ms per frame (median, min)")
    for name, values in costs.items():
        print(f"  {name:<20} {statistics.median(values):6.2f}  {min(values):6.2f}")


if __name__ == "__main__":
    main()
