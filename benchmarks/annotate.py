"""Cost per frame of the annotated video: drawing, and H.264 encoding with libx264 per preset.

Decodes the demo video (``vstream/assets/sample.mp4``, 640x360, 200 frames)
into memory, runs the demo model once for its boxes, then measures, per
frame, on the CPU:

- ``draw``: :meth:`vstream.annotate.Annotator.annotate` (RGB copy, boxes,
  labels, a counting line, a zone, the status line);
- ``encode``: libx264 through PyAV (the :class:`~vstream.sinks.video.writer.VideoWriter`
  backend, called directly, flush included) for each preset, as wall time and
  as process CPU time (what it takes from detection on a shared CPU), with
  the size of the resulting file;
- ``writer``: draw on this thread and encode on the writer's, end to end
  (``VideoWriter`` with ``policy="block"``), wall and CPU time per frame.

Other processes on the machine inflate wall times (the load average is
printed); the CPU times are the steadier figure. The drawing thread runs torch
with one thread by default (``--torch-threads``): drawing is made of small
operations, and with more threads OpenMP's spinning workers compete with
libx264's threads for the cores.

Run from the repository root::

    .venv/bin/python benchmarks/annotate.py [--repeat 3] [--presets medium,veryfast,ultrafast]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import av
import torch

import vstream
from vstream.annotate import Annotator, LineOverlay, ZoneOverlay
from vstream.sinks.video.container import TIME_BASE, container_format
from vstream.sinks.video.encoders import DEFAULT_PRESET
from vstream.sinks.video.libx264 import LibX264
from vstream.sinks.video.writer import VideoWriter
from vstream.sources import VideoFileSource

PRESETS = ("medium", "veryfast", "superfast", "ultrafast")


def load(path: Path) -> tuple[list, list, float]:
    """Every frame of ``path`` (RGB, CPU) and the demo model's result for each."""
    with VideoFileSource(path) as source:
        frames, fps = list(source), source.fps or 25.0
    detector = vstream.Detector(vstream.assets.DEMO_MODEL, device="cpu")
    results = [result for frame in frames for result in detector.detect([frame])]
    return frames, results, fps


def annotator() -> Annotator:
    return Annotator(
        [LineOverlay("gate", (320.0, 20.0), (320.0, 340.0))],
        [ZoneOverlay("dock", ((40.0, 200.0), (200.0, 190.0), (220.0, 330.0), (30.0, 340.0)))],
    )


def draw_ms(frames: list, results: list, repeat: int) -> float:
    drawer = annotator()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for frame, result in zip(frames, results, strict=True):
            drawer.annotate(frame, result, line_counts={"gate": (3, 5)}, fps=25.0)
        best = min(best, (time.perf_counter() - start) / len(frames))
    return best * 1000


def encode_ms(
    images: list[torch.Tensor], fps: float, preset: str, repeat: int, tmp: Path
) -> tuple[float, float, int]:
    """Best wall and CPU milliseconds per frame encoding ``images``, and the file's size."""
    height, width = images[0].shape[:2]
    best_wall = best_cpu = float("inf")
    size = 0
    path = tmp / f"{preset}.mp4"
    for _ in range(repeat):
        options = {"preset": preset, "crf": 23, "threads": 0}
        backend = LibX264(path, container_format(path), width, height, fps, options)
        wall, cpu = time.perf_counter(), time.process_time()
        for i, image in enumerate(images):
            backend.encode(image, round(i / (fps * TIME_BASE)))
        backend.finish()
        best_wall = min(best_wall, (time.perf_counter() - wall) / len(images))
        best_cpu = min(best_cpu, (time.process_time() - cpu) / len(images))
        size = path.stat().st_size
    return best_wall * 1000, best_cpu * 1000, size


def writer_ms(
    frames: list, results: list, fps: float, preset: str, repeat: int, tmp: Path
) -> tuple[float, float]:
    """Best wall and CPU ms per frame, drawing here and encoding on the writer's thread."""
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        drawer = annotator()
        wall, cpu = time.perf_counter(), time.process_time()
        width, height = frames[0].width, frames[0].height
        with VideoWriter(tmp / "writer.mp4", width, height, fps, preset=preset) as writer:
            for frame, result in zip(frames, results, strict=True):
                writer.write(drawer.annotate(frame, result, fps=25.0), frame.pts_seconds)
        assert writer.stats.frames_written == len(frames)
        best_wall = min(best_wall, (time.perf_counter() - wall) / len(frames))
        best_cpu = min(best_cpu, (time.process_time() - cpu) / len(frames))
    return best_wall * 1000, best_cpu * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case, best kept")
    parser.add_argument("--presets", default=",".join(PRESETS), help="libx264 presets to time")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch threads of the drawing thread (default 1: with more, OpenMP's spinning "
        "workers take CPU from the encoder's threads)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    presets = [p for p in args.presets.split(",") if p]
    frames, results, fps = load(Path(vstream.assets.SAMPLE_VIDEO))
    boxes = sum(len(r.detections) for r in results) / len(results)
    print(
        f"{len(frames)} frames {frames[0].width}x{frames[0].height} @ {fps:g} fps, "
        f"{boxes:.1f} boxes a frame; {os.cpu_count()} CPU cores, torch threads "
        f"{torch.get_num_threads()}, PyAV {av.__version__} (FFmpeg {av.ffmpeg_version_info}), "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    drawn = draw_ms(frames, results, args.repeat)
    print(f"draw (Annotator.annotate, CPU): {drawn:.2f} ms/frame")
    drawer = annotator()
    images = [drawer.annotate(f, r, fps=25.0) for f, r in zip(frames, results, strict=True)]
    print(f"{'libx264 preset':<16}{'wall ms/frame':>14}{'CPU ms/frame':>14}{'size kB':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for preset in presets:
            wall, cpu, size = encode_ms(images, fps, preset, args.repeat, Path(tmp))
            default = "  (default)" if preset == DEFAULT_PRESET else ""
            print(f"{preset:<16}{wall:>14.2f}{cpu:>14.2f}{size / 1000:>10.0f}{default}")
        print("VideoWriter, draw on this thread + encode on its own (policy=block):")
        for preset in presets:
            wall, cpu = writer_ms(frames, results, fps, preset, args.repeat, Path(tmp))
            print(f"  {preset:<14}{wall:>14.2f}{cpu:>14.2f}")


if __name__ == "__main__":
    main()
